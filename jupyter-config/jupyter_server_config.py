# JupyterLab as `make lab` serves it (JUPYTER_CONFIG_PATH=jupyter-config): no news prompt, no request
# for news or updates, so an offline classroom opens quietly.
#
# lab/settings/overrides.json changes the defaults of the Notifications settings
# (@jupyterlab/apputils-extension:notification): fetchNews "false" (Never: the "Would you like to
# get notified about official Jupyter news?" prompt is not shown and /lab/api/news is not asked)
# and checkForUpdates false (/lab/api/update is not asked). JupyterLab reads overrides.json only
# from its application settings folder, so that folder is this one's lab/settings. A learner can
# still turn either on in Settings > Notifications. On the server side, too, no news feed is
# fetched and PyPI is never asked for a newer JupyterLab.
import os

c = get_config()  # noqa: F821 (defined by the config loader)
c.LabApp.app_settings_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lab", "settings")
c.LabApp.news_url = None
c.LabApp.check_for_updates_class = "jupyterlab.NeverCheckForUpdate"

# JupyterLab's terminal runs the shell as it is, not as a login shell. Started without a terminal
# (from a script, an IDE, a service), jupyter_server_terminals would run `$SHELL -l`, and
# /etc/profile would reset PATH, dropping .venv/bin, which `make lab` puts first so that
# `posenc-grade` runs in that terminal (tests/test_make_lab.py types it there).
c.ServerApp.terminado_settings = {"shell_command": [os.environ.get("SHELL") or "/bin/sh"]}
