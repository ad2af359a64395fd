"""The run plots (horovod_train/observe/plots.py): their labels, text of at least 9 pt,
legends off the data, labelled scaling points. matplotlib only, no TF."""
import matplotlib.text
import pytest

from horovod_train import report
from horovod_train.observe import plots


def test_rank_counts_are_singular_or_plural():
    assert plots.ranks(1) == "1 rank"
    assert plots.ranks(2) == "2 ranks" and plots.ranks(16) == "16 ranks"


def test_efficiency_reads_in_percent_and_rates_per_second():
    assert plots.percent(0.934) == "93%" and plots.percent(1.0) == "100%"
    assert plots.rate_label(1830.4) == "1,830/s"


def _texts(fig) -> list:
    fig.canvas.draw()  # tick labels exist once drawn
    return [t for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text()]


def assert_readable(fig, minimum=plots.MIN_FONT_PT):
    """Every visible text at least `minimum` pt, and no legend on any axes' data area."""
    texts = _texts(fig)
    assert texts
    small = [(t.get_text(), t.get_fontsize()) for t in texts if t.get_fontsize() < minimum]
    assert not small, small
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        box = legend.get_window_extent(renderer)
        for other in fig.axes:
            assert not box.overlaps(other.get_window_extent(renderer)), legend.get_texts()


def _run(name, world_size, rates, traced=None):
    traced = traced or [i == 0 for i in range(len(rates))]
    train = [{"step": 10 * (i + 1), "steps": 10, "time_s": float(i + 1), "traced": t,
              "samples_per_sec": r, "samples_per_sec_per_rank": [r / world_size] * world_size,
              "seconds_per_step": {"data": 0.001, "compute": 0.004, "comm": 0.002, "sync": 0.0,
                                   "other": 0.0005}}
             for i, (r, t) in enumerate(zip(rates, traced))]
    return report.Run(f"/runs/{name}", {"world_size": world_size}, train, [], None)


def test_throughput_and_breakdown_figures_are_readable_and_say_1_rank():
    one = _run("one", 1, [20.0, 500.0, 510.0])
    two = _run("two", 2, [30.0, 900.0, 920.0])
    fig = plots.throughput_figure([one, two])
    assert_readable(fig)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "one (1 rank)" in labels and "two (2 ranks)" in labels
    assert "one: includes tracing" in labels  # the traced interval is told apart
    fig = plots.breakdown_figure(one)
    assert_readable(fig)
    assert fig.axes[0].get_title() == "Where the time goes: one (1 rank)"
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[:3] == ["data", "compute", "comm"] and plots.TRACED in legend
    # The axis is scaled to the intervals that did not trace (7.5 ms a step), not to tracing.
    assert fig.axes[0].get_ylim()[1] == pytest.approx(1.3 * 7.5)


def test_scaling_points_are_labelled_with_their_values():
    points = [(1, 1000.0, 1.0, "a"), (2, 1800.0, 0.9, "b"), (4, 3000.0, 0.75, "c")]
    fig = plots.scaling_figure(points)
    assert_readable(fig)
    left, right = fig.axes
    assert {"1,000/s", "1,800/s", "3,000/s"} <= {t.get_text() for t in left.texts}
    assert {"100%", "90%", "75%"} <= {t.get_text() for t in right.texts}
    assert right.get_ylabel() == "scaling efficiency (%)"


def test_the_report_writes_its_pngs(tmp_path):
    for name, size in (("a", 1), ("b", 2)):
        run = _run(name, size, [10.0, 100.0 * size])
        run.path = str(tmp_path / name)
        (tmp_path / name).mkdir()
        for path in plots.throughput([run], run.path + "/t.png"), \
                plots.breakdown(run, run.path + "/b.png"):
            assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
