"""dpsuite's Hydra plugins. Hydra takes launchers from the ``hydra_plugins`` package only, so
the SLURM launcher (``dpsuite.sweep.slurm_launcher``) is named here for ``hydra/launcher=slurm``.

It is built on hydra-submitit-launcher, which only the ``slurm`` extra installs: without it
there is no launcher here (and Hydra's plugin scan has nothing to warn about);
``hydra/launcher=slurm`` is then refused in one line naming the extra.
"""

from importlib.util import find_spec


def slurm_available() -> bool:
    """hydra-submitit-launcher (the ``slurm`` extra) is installed."""
    try:
        return find_spec("hydra_plugins.hydra_submitit_launcher") is not None
    except (ImportError, ValueError):
        return False


if slurm_available():
    from dpsuite.sweep import slurm_launcher

    class SlurmLauncher(slurm_launcher.SlurmLauncher):
        """Submits a sweep's runs as a SLURM job array and follows them (see dpsuite.sweep)."""
