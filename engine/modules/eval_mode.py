"""`eval_mode(model)`: eval mode for a block, the model's own mode restored after."""

from contextlib import contextmanager


@contextmanager
def eval_mode(model):
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)
