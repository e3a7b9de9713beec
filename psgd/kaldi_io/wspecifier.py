"""Kaldi's write specifiers (src/util/kaldi-table.cc, ClassifyWspecifier;
kaldi-io.cc, ClassifyWxfilename), for the tables psgd writes:

    ark:FILE            an archive, binary        ark,t:FILE   the same, text
    ark:-               the archive on standard output (for `... ark:- | latgen-...`)
    ark,scp:ARK,SCP     the archive and its index (`utt ARK:offset`), both written
    FILE                psgd's shorthand for ark:FILE

Options before the colon, separated by commas: ark, scp (only after ark),
b (binary), t (text), f / nf (flush, no-flush) and p (permissive) are
accepted as Kaldi accepts them. An output pipe (`ark:|gzip -c >x`) is
refused: pipe standard output instead.
"""
from dataclasses import dataclass

from psgd.errors import UsageError

OPTIONS = ("b", "t", "f", "nf", "p")
STDOUT = "-"


@dataclass
class Wspecifier:
    ark: str                # a file name, or "-" for standard output
    scp: str = None
    text: bool = False

    @property
    def stdout(self):
        return self.ark == STDOUT


def parse(wspec):
    """The Wspecifier of `wspec`; one that Kaldi would not accept, or that
    names a pipe, is a UsageError naming it."""
    def refuse(why):
        raise UsageError("%s: %s (write to ark:FILE, ark,t:FILE, ark:- or ark,scp:ARK,SCP)"
                         % (wspec, why))

    head, colon, rest = wspec.partition(":")
    if not colon:
        head, rest = "ark", wspec
    if rest != rest.strip():
        refuse("leading or trailing space")
    kinds, text = [], False
    for option in head.replace(" ", ",").split(","):
        if option in ("ark", "scp"):
            if option in kinds or (option == "ark" and kinds):
                refuse("options in the wrong order (Kaldi takes ark,scp)")
            kinds.append(option)
        elif option in OPTIONS:
            text = {"t": True, "b": False}.get(option, text)
        else:
            refuse("unknown option %r" % option)
    if kinds == ["scp"]:
        refuse("scp: alone writes each utterance to a file of its own, which psgd does not")
    if not kinds:
        refuse("no ark")
    ark, scp = rest, None
    if kinds == ["ark", "scp"]:
        ark, comma, scp = rest.partition(",")
        if not comma or not ark or not scp:
            refuse("ark,scp takes two names, ARK,SCP")
        if scp == STDOUT or ark == STDOUT:
            refuse("the index needs the archive in a file")
        if ark == scp:
            refuse("the archive and its index are one file")
    for name in (ark, scp):
        if name is not None and (name.startswith("|") or name.endswith("|")):
            refuse("output pipes are not supported")
    if ark == "":
        ark = STDOUT      # Kaldi: an empty wxfilename is standard output too
    return Wspecifier(ark, scp, text)
