"""Data: image sources (the embedded sample, ImageFolder, CIFAR-10, timm datasets), loaders and checks."""
