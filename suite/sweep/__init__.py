"""Many runs: Hydra multiruns with a manifest, resume and a summary, and the demo."""
