"""Sharing a trained model: export to a model folder, its model card, predict, the Hub."""
