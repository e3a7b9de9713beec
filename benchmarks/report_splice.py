"""A partial run's report spliced into the BENCHMARKS.md that is there.

BENCHMARKS.md is generated, and then annotated by hand: a section measured
again outside `make bench` says how and when, a note explains a cell. A run
of a few sections (`--only`, `--regime cluster`) used to render the whole
file anew from the saved results, which dropped every such note of the
sections it did not measure (339 lines when cluster_servers alone was run
again). So a partial run replaces only what it measured: the blocks headed
`## <title>` of its sections, its sections' headline lines, and the blocks
the run itself owns (the opening lines, Machine, Findings, Time per
section); every other block stays as written.
"""

# blocks the run writes whole, whatever it measured (FINDINGS.md is the
# findings block's source)
OWNED = (None, "Machine", "Findings: what was slow, what was fixed, what remains",
         "Time per section")
HEADLINES = "Headlines"


def blocks(text):
    """[(title, lines)] of the Markdown `text`, cut before each `## ` line;
    the lines before the first have the title None."""
    out, title, lines = [], None, []
    for line in text.split("\n"):
        if line.startswith("## "):
            out.append((title, lines))
            title, lines = line[3:].strip(), []
        lines.append(line)
    out.append((title, lines))
    return out


def splice(old, new, titles, old_heads, new_heads):
    """`old` with the blocks of `titles` and OWNED taken from `new` (in old's
    order; a block new has and old lacks goes where new puts it), and in
    the Headlines block each line of `old_heads` dropped, `new_heads` in
    place of the first of them (after the last headline where none is
    there). Returns (text, old heads that were not found)."""
    fresh = dict(blocks(new))
    taken = set(titles) | set(OWNED)
    out, seen = [], set()
    missing = []
    for title, lines in blocks(old):
        seen.add(title)
        if title == HEADLINES:
            lines, missing = _headlines(lines, old_heads, new_heads)
        elif title in taken and title in fresh:
            lines = fresh[title]
        out.append((title, lines))
    order = [t for t, _ in blocks(new)]
    for title in order:
        if title in taken and title not in seen:     # a section new to the report
            before = order[:order.index(title)]
            at = max((i for i, (t, _) in enumerate(out) if t in before), default=len(out) - 1)
            out.insert(at + 1, (title, fresh[title]))
            seen.add(title)
    return "\n".join(line for _, lines in out for line in lines), missing


def _headlines(lines, old_heads, new_heads):
    old_lines = ["- " + h for h in old_heads]
    new_lines = ["- " + h for h in new_heads]
    kept, at = [], None
    for line in lines:
        if line in old_lines:
            if at is None:
                at = len(kept)
            continue
        kept.append(line)
    if at is None:          # after the last headline (before the block's blank tail)
        at = max((i + 1 for i, line in enumerate(kept) if line.startswith("- ")),
                 default=len(kept))
    missing = [h for h, line in zip(old_heads, old_lines) if line not in lines]
    return kept[:at] + new_lines + kept[at:], missing
