"""The check that no two texts of a drawn figure overlap (:func:`text_overlaps`), which the
figure tests run on every figure they draw."""

from __future__ import annotations


def text_overlaps(fig, tolerance: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of texts of ``fig`` whose boxes overlap by more than ``tolerance`` pixels both ways,
    as drawn (every visible, non-empty text a draw renders: titles, tick and axis labels,
    annotations, legend and colour-bar texts; tick labels outside an axis' view are not drawn)."""
    from matplotlib.text import Text

    drawn: list[tuple[str, object]] = []
    original = Text.draw

    def draw(self, renderer):
        original(self, renderer)
        if self.get_visible() and self.get_text().strip():
            drawn.append((self.get_text(), self.get_window_extent(renderer)))

    from matplotlib.backends.backend_agg import RendererAgg

    w, h = fig.get_size_inches() * fig.dpi
    Text.draw = draw
    try:  # the figure's own draw on an Agg renderer: a closed (saved) figure draws too
        fig.draw(RendererAgg(int(w), int(h), fig.dpi))
    finally:
        Text.draw = original
    out = []
    for i, (a, ba) in enumerate(drawn):
        for b, bb in drawn[i + 1 :]:
            w = min(ba.x1, bb.x1) - max(ba.x0, bb.x0)
            h = min(ba.y1, bb.y1) - max(ba.y0, bb.y0)
            if w > tolerance and h > tolerance:
                out.append((a, b))
    return out
