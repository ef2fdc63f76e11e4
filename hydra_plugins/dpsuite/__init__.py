"""dpsuite's Hydra plugins. Hydra takes launchers from the ``hydra_plugins`` package only, so
the SLURM launcher (``suite.sweep.slurm_launcher``) is named here for ``hydra/launcher=slurm``."""

from suite.sweep import slurm_launcher


class SlurmLauncher(slurm_launcher.SlurmLauncher):
    """Submits a sweep's runs as a SLURM job array and follows them (see suite.sweep)."""
