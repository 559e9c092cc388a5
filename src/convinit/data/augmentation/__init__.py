"""Batch augmentation on the training device: crops, flips, RandAugment (timm's and
torchvision's definitions), erasing, mixup and cutmix."""
