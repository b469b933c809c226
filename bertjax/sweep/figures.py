"""Figures of the sweep and suite reports: matplotlib's pyplot, started the way the
report is read, and figures saved as PNG files. Imports matplotlib only when called, so
that the tools that import the reports answer --help at once."""

import os
import sys


def pyplot():
    """matplotlib.pyplot: drawing to files (Agg) unless in a notebook kernel, where figures
    show inline."""
    import matplotlib

    if "ipykernel" not in sys.modules:  # files from the command line, inline in a notebook
        matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    return plt


def save(figures: dict, out_dir: str) -> list[str]:
    """Each figure of `figures` ({name: figure or None}) as out_dir/NAME.png, then closed;
    the paths written."""
    written = []
    for name, fig in figures.items():
        if fig is not None:
            written.append(os.path.join(out_dir, f"{name}.png"))
            fig.savefig(written[-1], dpi=100)
            pyplot().close(fig)
    return written
