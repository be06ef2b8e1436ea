"""The benchmark report's plots: a line per series over a log-scale x, with
a title, axis titles with units, and a legend.

Each plot is written as NAME.svg and, where matplotlib is installed (Debian:
python3-matplotlib), as NAME.png beside it, both drawn by matplotlib.
Without it the SVG is drawn by hand with the same elements and no PNG is
written, so the report needs nothing beyond the standard library.
"""
import math

try:
    import matplotlib
    matplotlib.use("Agg")  # files only, never a display
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text in the SVG
    import matplotlib.pyplot as pyplot
except ImportError:
    pyplot = None


def nice_ticks(top, most=6):
    """Ticks from 0 at a step of 1, 2 or 5 times a power of ten, the last at
    or above top, at most `most` of them."""
    top = max(top, 1e-9)
    power = 10 ** math.floor(math.log10(top / (most - 1)))
    step = next(m * power for m in (1, 2, 5, 10) if top / (m * power) <= most - 1)
    return [i * step for i in range(int(math.ceil(top / step - 1e-9)) + 1)]


def tick_text(v):
    return "%g" % v


def draw(path, title, xtitle, ytitle, series, xtext):
    """series: {name: [(x, y), ...]}, x > 0; xtext(x) labels the ticks,
    placed at the measured x values.  Writes path.svg, and path.png when
    matplotlib is there; returns the files written."""
    if pyplot:
        return with_matplotlib(path, title, xtitle, ytitle, series, xtext)
    by_hand(path + ".svg", title, xtitle, ytitle, series, xtext)
    return [path + ".svg"]


def with_matplotlib(path, title, xtitle, ytitle, series, xtext):
    xs = sorted({x for pts in series.values() for x, _ in pts})
    fig, ax = pyplot.subplots(figsize=(9, 4.5))
    for name, pts in sorted(series.items()):
        ax.plot(*zip(*sorted(pts)), marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xticks(xs)
    ax.set_xticklabels([xtext(x) for x in xs])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.set_xlabel(xtitle)
    ax.set_ylabel(ytitle)
    ax.grid(True, color="#ddd")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    fig.tight_layout()
    files = [path + ".svg", path + ".png"]
    for f in files:
        fig.savefig(f, dpi=120)
    pyplot.close(fig)
    return files


# The hand-drawn SVG's frame, in pixels.
LEFT, RIGHT, TOP, BOTTOM, WIDTH, HEIGHT = 70, 560, 40, 360, 900, 410


def by_hand(path, title, xtitle, ytitle, series, xtext):
    xs = sorted({x for pts in series.values() for x, _ in pts})
    ticks = nice_ticks(max([y for pts in series.values() for _, y in pts] + [1]))
    lo, hi = (math.log10(xs[0]), math.log10(xs[-1])) if xs else (0, 0)
    px = lambda x: LEFT + (RIGHT - LEFT) * (  # noqa: E731
        (math.log10(x) - lo) / (hi - lo) if hi > lo else 0.5)
    py = lambda y: BOTTOM - (BOTTOM - TOP) * y / ticks[-1]  # noqa: E731
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-size="11" '
           'font-family="sans-serif">' % (WIDTH, HEIGHT),
           '<text x="%d" y="20" font-size="14" text-anchor="middle">%s</text>' % (
               (LEFT + RIGHT) // 2, title),
           '<text x="%d" y="%d" text-anchor="middle">%s</text>' % (
               (LEFT + RIGHT) // 2, HEIGHT - 5, xtitle),
           '<text transform="translate(15,%d) rotate(-90)" text-anchor="middle">%s</text>' % (
               (TOP + BOTTOM) // 2, ytitle),
           '<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>' % (
               LEFT, TOP, RIGHT - LEFT, BOTTOM - TOP)]
    out += ['<text x="%d" y="%.0f" text-anchor="end">%s</text><line x1="%d" x2="%d" y1="%.0f" '
            'y2="%.0f" stroke="#ddd"/>' % (LEFT - 5, py(y) + 4, tick_text(y), LEFT, RIGHT,
                                           py(y), py(y)) for y in ticks]
    out += ['<text x="%.0f" y="%d" text-anchor="middle">%s</text><line x1="%.0f" x2="%.0f" '
            'y1="%d" y2="%d" stroke="#ddd"/>' % (px(x), BOTTOM + 15, xtext(x), px(x), px(x),
                                                 TOP, BOTTOM) for x in xs]
    for k, (name, pts) in enumerate(sorted(series.items())):
        color = "hsl(%d,70%%,40%%)" % (k * 67 % 360)
        points = " ".join("%.0f,%.0f" % (px(x), py(y)) for x, y in sorted(pts))
        out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (
            color, points))
        out += ['<circle cx="%.0f" cy="%.0f" r="3" fill="%s"/>' % (px(x), py(y), color)
                for x, y in pts]
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/>'
                   '<text x="%d" y="%d">%s</text>' % (
                       RIGHT + 15, RIGHT + 35, TOP + 15 * k, TOP + 15 * k, color,
                       RIGHT + 40, TOP + 4 + 15 * k, name))
    with open(path, "w") as f:
        f.write("\n".join(out + ["</svg>"]) + "\n")
