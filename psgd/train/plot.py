"""Learning curves: loss and accuracy against epochs and against wall time."""
import os

from ..atomic import atomic_write


def plot_curves(rows, path, title="psgd"):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def column(key):
        return [r.get(key) if r.get(key) is not None else float("nan") for r in rows]

    epochs, wall = column("epoch"), column("wall_seconds")
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for col, (x, xlabel) in enumerate(((epochs, "epoch"), (wall, "wall time (s)"))):
        ax = axes[0][col]
        ax.plot(x, column("train_loss"), label="train")
        ax.plot(x, column("test_loss"), label="held-out")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("loss")
        ax.legend()
        ax = axes[1][col]
        ax.plot(x, [100 * a for a in column("test_accuracy")], color="C2")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("held-out accuracy (%)")
    fig.suptitle(title)
    fig.tight_layout()
    fmt = os.path.splitext(path)[1][1:].lower()
    atomic_write(path, lambda f: fig.savefig(f, dpi=90, format=fmt))
    plt.close(fig)
