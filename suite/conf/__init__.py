"""Configuration: the Hydra YAML presets beside the code that composes and checks them."""
