"""Position keys of released checkpoints' config.json that describe_positions must read as transformers does.

Used by tools/record_checkpoints.py (with FAMILY_CONFIGS of tools/hf_model_configs.py). Keys are
kept as the checkpoints publish them (transformers 4's rope_theta / rope_scaling, nested or top-level
text keys, unusual values such as Kimi-K2's YaRN with beta_fast == beta_slow == 1.0); layer and
expert counts are cut where no frequency depends on them, so transformers builds them quickly.
"""

_NOPE_EVERY_4TH = [1, 1, 1, 0] * 2  # SmolLM3: every 4th layer without RoPE (no_rope_layer_interval 4)

CHECKPOINTS = {
    "kimi_k2_instruct": {
        "source": "moonshotai/Kimi-K2-Instruct config.json (model_type kimi_k2, DeepseekV3ForCausalLM; "
        "yarn 32 with beta_fast = beta_slow = 1.0; layers and experts cut)",
        "record_as": "deepseek_v3",
        "config": {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "kimi_k2",
            "hidden_size": 7168,
            "num_attention_heads": 64,
            "num_key_value_heads": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 64,
            "moe_intermediate_size": 64,
            "n_routed_experts": 8,
            "num_experts_per_tok": 2,
            "n_group": 1,
            "topk_group": 1,
            "first_k_dense_replace": 1,
            "kv_lora_rank": 512,
            "q_lora_rank": 1536,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
            "rope_theta": 50000.0,
            "max_position_embeddings": 131072,
            "rope_scaling": {
                "beta_fast": 1.0,
                "beta_slow": 1.0,
                "factor": 32.0,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "original_max_position_embeddings": 4096,
                "type": "yarn",
            },
        },
    },
    "mixtral_8x7b": {
        "source": "mistralai/Mixtral-8x7B-v0.1 config.json (rope_theta 1e6, no sliding window; layers cut)",
        "config": {
            "model_type": "mixtral",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "num_hidden_layers": 4,
            "intermediate_size": 64,
            "num_local_experts": 2,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
            "sliding_window": None,
        },
    },
    "qwen3_30b_a3b": {
        "source": "Qwen/Qwen3-30B-A3B config.json (qwen3_moe, head_dim 128, rope_theta 1e6; layers cut)",
        "config": {
            "model_type": "qwen3_moe",
            "hidden_size": 2048,
            "num_attention_heads": 32,
            "num_key_value_heads": 4,
            "head_dim": 128,
            "num_hidden_layers": 4,
            "intermediate_size": 64,
            "moe_intermediate_size": 64,
            "num_experts": 4,
            "max_position_embeddings": 40960,
            "rope_theta": 1000000.0,
            "rope_scaling": None,
            "use_sliding_window": False,
            "sliding_window": None,
        },
    },
    "qwen25_vl_7b": {
        "source": "Qwen/Qwen2.5-VL-7B-Instruct config.json (text keys at the top level, mrope_section "
        "[16, 24, 24]; layers cut)",
        "config": {
            "model_type": "qwen2_5_vl",
            "hidden_size": 3584,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "num_hidden_layers": 4,
            "intermediate_size": 64,
            "max_position_embeddings": 128000,
            "rope_theta": 1000000.0,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        },
    },
    "smollm3_3b": {
        "source": "HuggingFaceTB/SmolLM3-3B config.json (no_rope_layers: every 4th layer NoPE, rope_theta "
        "5e6; layers cut to 8)",
        "config": {
            "model_type": "smollm3",
            "hidden_size": 2048,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "num_hidden_layers": 8,
            "intermediate_size": 64,
            "max_position_embeddings": 65536,
            "rope_theta": 5000000.0,
            "rope_scaling": None,
            "no_rope_layer_interval": 4,
            "no_rope_layers": _NOPE_EVERY_4TH,
            "use_sliding_window": False,
            "sliding_window": None,
        },
    },
    "qwen3_next_80b": {
        "source": "Qwen/Qwen3-Next-80B-A3B-Instruct config.json (full_attention_interval 4: 3 Gated "
        "DeltaNet layers, 1 attention layer; partial_rotary_factor 0.25; layers cut to 8)",
        "config": {
            "model_type": "qwen3_next",
            "hidden_size": 2048,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "head_dim": 256,
            "num_hidden_layers": 8,
            "intermediate_size": 64,
            "moe_intermediate_size": 64,
            "shared_expert_intermediate_size": 64,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "partial_rotary_factor": 0.25,
            "rope_theta": 10000000,
            "max_position_embeddings": 262144,
            "full_attention_interval": 4,
        },
    },
    "command_r7b": {
        "source": "CohereForAI/c4ai-command-r7b-12-2024 config.json (cohere2: RoPE on the sliding layers "
        "only, sliding_window_pattern 4; layers cut to 8)",
        "config": {
            "model_type": "cohere2",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "num_hidden_layers": 8,
            "intermediate_size": 64,
            "rope_theta": 50000.0,
            "sliding_window": 4096,
            "sliding_window_pattern": 4,
            "max_position_embeddings": 8192,
        },
    },
}
