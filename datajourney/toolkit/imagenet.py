"""ImageNet's channel statistics, the constants of the "normalise" step (no torch): the loaders normalise
with them and the pages print them in the snippets they show."""

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
