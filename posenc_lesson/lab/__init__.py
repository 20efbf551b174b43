"""The training lab: what trains, built from the math modules one floor up.

    model        TinyDecoder: a tiny causal Transformer, position scheme chosen by name (SCHEMES)
    copy_task    the copy task (BOS x1..xn SEP x1..xn): copy_batch, with loss only on the copy
    train        training and evaluation with a progress bar
    jobs         a lab's models trained one after the other or several at once, one process each
    experiments  the length-extrapolation lab: python -m posenc_lesson.lab.experiments
                 (what `make experiments` runs) rewrites its CSV in notebooks/
    analysis     why a copy model fails past L: its accuracy by copy offset and by absolute position
                 (lesson 08's "why" cells, 08_why.csv)
    context_extension  lesson 09's lab: a trained RoPE model stretched to 4L five ways, zero-shot
                 and fine-tuned (python -m posenc_lesson.lab.context_extension, also in `make experiments`)
    vision_lab   lesson 11's lab: a tiny ViT-like encoder trained on 6x6 grids, tested up to 12x12
                 (python -m posenc_lesson.lab.vision_lab, also in `make experiments`)
    lm_corpus    lesson 10's corpus (King James Version, Genesis to Esther, checked by its SHA-256), its
                 training/validation blocks, bits per byte with non-overlapping and sliding windows
    lm_probes    lesson 10's probes of a byte model: the memory autograd keeps, T5's untrained buckets filled
    lm_lab       lesson 10's lab: the seven schemes as byte-level language models at L = 64, three seeds,
                 evaluated to 8L (python -m posenc_lesson.lab.lm_lab, also in `make experiments`)
    after_rope_attention  the after-RoPE layers the byte model can use: xPos, FoX's forget gates, CoPE,
                 FIRE, stick-breaking attention, a RoPE/NoPE layer mix (each the library's function)
    after_rope_lab  the after-RoPE lab: those six schemes on lesson 10's protocol, three seeds, to 8L
                 (python -m posenc_lesson.lab.after_rope_lab, also in `make experiments`)
    field_bugs   lesson 12's lab: a trained copy model run as an inference engine runs it (positions per
                 row and their dtype, layout, mask, ALiBi slopes), with six shipped bugs switched on

The lab imports the math modules (``posenc_lesson.attention``, ``rope``, ...) and never the
tasks or the grader. Its public names are also at the top: ``posenc_lesson.TinyDecoder``,
``posenc_lesson.SCHEMES`` and ``posenc_lesson.copy_batch``.
"""
