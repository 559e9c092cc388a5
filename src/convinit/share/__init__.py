"""Sharing a trained model: export to a model folder (from a run reopened the one way runs are opened),
its model card, predict, the Hub, and convinit's presets in timm's registry."""
