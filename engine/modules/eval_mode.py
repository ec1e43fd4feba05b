"""`eval_mode(model)`: eval mode for a block, the model's own mode restored after."""

from contextlib import contextmanager


@contextmanager
def eval_mode(model):
    """Eval mode inside the block (dropout off, BatchNorm on its running statistics); yields the model and restores
    its own mode after, even on an error."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)
