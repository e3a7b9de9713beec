"""Every file a run will write, known before the first epoch: --out (and, for
NAME.nnet, final.feature_transform and ali_train_pdf.counts beside it),
--metrics, --plot and --checkpoint-dir. The plan refuses, in one line naming
the flag and the path, a place that cannot be written and two outputs that
are one file (one would silently replace the other, or the run would end in
a crash after its last epoch), or an output that would replace an input the
user gave. The Kaldi tools (`psgd.kaldi convert`, `forward`) check their
files here too.
"""
import os
import tempfile
from dataclasses import dataclass

from ..atomic import TMP, writer_name
from ..data.rspecifier import parse_rspecifier
from ..errors import UsageError
from . import model_files

PLOT_FORMATS = ("png", "pdf", "svg", "svgz", "eps", "ps", "jpg", "jpeg", "tif", "tiff",
                "webp", "pgf")
# what Checkpointer and DirectoryLock write inside --checkpoint-dir
CHECKPOINT_NAMES = ("LATEST", ".lock")
CHECKPOINT_PREFIX = "epoch-"


@dataclass
class Output:
    label: str              # the flag that asks for it ("" for a positional argument)
    path: str
    folder: bool = False
    formats: tuple = None   # file extensions accepted (--plot)
    all_ranks: bool = False  # every rank writes in it (checkpoints), not only rank 0
    beside: str = None      # a side file: the model file it is written beside

    def __str__(self):
        if self.beside:
            return "%s (written beside %s)" % (self.path, " ".join(
                filter(None, (self.label, self.beside))))
        return "%s %s" % (self.label, self.path) if self.label else self.path


def of_args(outputs, data=None):
    """The run's outputs: [Output] of the output flags (the trainer's
    Outputs section), side files of an nnet1 --out included (those `data`'s
    transform and counts make save_model write)."""
    plan = []
    if outputs.out:
        plan += model_file(outputs.out, data, "--out")
    if outputs.metrics:
        plan.append(Output("--metrics", outputs.metrics))
    if outputs.plot:
        plan.append(Output("--plot", outputs.plot, formats=PLOT_FORMATS))
    if outputs.timeline:
        plan.append(Output("--timeline", outputs.timeline, formats=("json",)))
    if outputs.checkpoint_dir:
        plan.append(Output("--checkpoint-dir", outputs.checkpoint_dir, folder=True,
                           all_ranks=True))
    return plan


def model_file(path, data, label):
    """[Output] of save_model(path, ..., data): the model and its side files."""
    files = model_files.files_written(path, data)
    return [Output(label, files[0])] + [Output(label, side, beside=path)
                                        for side in files[1:]]


def inputs_of(data):
    """[(flag, file)] of the files a run reads (the data flags: the
    trainer's Data section) that an output could replace."""
    flags = [("--feats", data.feats, True), ("--targets", data.targets, True),
             ("--cv-feats", data.cv_feats, True), ("--cv-targets", data.cv_targets, True),
             ("--feature-transform", data.feature_transform, False)]
    return [("%s %s" % (flag, value), path) for flag, value, table in flags if value
            for path in (input_files(value) if table else [value])]


def input_files(spec):
    """The files a Kaldi rspecifier (or a plain path) reads: an scp and the
    archives it lists; none for a pipe or stdin."""
    try:
        rspec = parse_rspecifier(spec)
    except UsageError:
        return [spec]
    if rspec.is_stream:
        return []
    files = [rspec.path]
    if rspec.kind == "scp":
        try:
            with open(rspec.path, errors="replace") as f:
                entries = {line.split(None, 1)[1].strip() for line in f
                           if len(line.split(None, 1)) == 2}
        except OSError:
            return files    # reading it is the data's business, and fails there
        files += sorted({_archive_of(e) for e in entries} - {None})
    return files


def _archive_of(entry):
    """The file of an scp entry "file.ark:offset" (or "file"); None for a pipe."""
    if entry.endswith("|") or entry.startswith("|"):
        return None
    path, colon, offset = entry.rpartition(":")
    return path if colon and offset.isdigit() else entry


def problem(plan, main=True, inputs=()):
    """The one-line text of the first problem in `plan`, or None. `main`:
    this rank writes the files (rank 0); the others check only the folders
    every rank writes in. `inputs`: [(who, file)] that no output may replace."""
    mine = [o for o in plan if main or o.all_ranks]
    for output in mine:
        text = (_folder_problem if output.folder else _file_problem)(output)
        if text:
            return text
    return collision(plan) or replaced_input(plan, inputs)


def replaced_input(plan, inputs):
    """An output that would replace an input file. A feature transform
    written beside an nnet1 model is the one the run applies: writing it
    over that input changes no value."""
    given = {os.path.realpath(path): who for who, path in inputs if path}
    for output in plan:
        who = given.get(os.path.realpath(output.path))
        if who and not (output.beside and who.startswith("--feature-transform")
                        and os.path.basename(output.path) == model_files.TRANSFORM_FILE):
            return "%s would replace the input %s: give it another name" % (output, who)
    return None


def collision(plan):
    """Two outputs that are one file, or a file where checkpoints go."""
    seen = {}
    folders = [o for o in plan if o.folder]
    for output in plan:
        if output.folder:
            continue
        real = os.path.realpath(output.path)
        if real in seen:
            return "%s is also %s: give each output its own file" % (output, seen[real])
        seen[real] = output
        for folder in folders:
            text = _in_checkpoints(output, real, folder)
            if text:
                return text
    return None


def _in_checkpoints(output, real, folder):
    top = os.path.realpath(folder.path)
    if real == top:
        return "%s is also %s: give each output its own place" % (output, folder)
    if top.startswith(real + os.sep):
        return "%s is a file, but %s is under it" % (output, folder)
    if real.startswith(top + os.sep):
        first = os.path.relpath(real, top).split(os.sep)[0]
        if first in CHECKPOINT_NAMES or first.startswith(CHECKPOINT_PREFIX):
            return "%s is inside %s, where checkpoints are written: give it another name" \
                % (output, folder)
    return None


def _file_problem(output):
    path = output.path
    hint = "move it out of the way" if output.beside else "give a file name"
    if os.path.isdir(path):
        return "%s is a directory; %s" % (output, hint)
    if os.path.exists(path) and not os.path.isfile(path):
        # a file is written beside and renamed over its name: a device or a
        # pipe would be replaced, not written to
        return "%s is not a regular file; %s" % (output, hint)
    if output.formats is not None:
        ext = os.path.splitext(path)[1][1:].lower()
        if ext not in output.formats:
            return "%s: unknown format %r; use one of %s" % (
                output, ext, ", ".join("." + f for f in output.formats))
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return "%s: file is not writable" % output
    return _writable_folder(os.path.dirname(os.path.abspath(path)), output)


def _folder_problem(output):
    if os.path.exists(output.path) and not os.path.isdir(output.path):
        return "%s is not a directory" % output
    return _writable_folder(os.path.abspath(output.path), output)


def _writable_folder(folder, output):
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return "%s: %s is not a directory" % (output, existing)
    try:   # the one honest test (root ignores permission bits, mounts may be read-only)
        fd, probe = tempfile.mkstemp(prefix="%s%s-" % (TMP, writer_name()), dir=existing)
        os.close(fd)
        try:
            os.unlink(probe)
        except FileNotFoundError:
            pass    # rank 0's sweep of the checkpoint folder took it: it was written
    except OSError as exc:
        return "%s: cannot write in %s (%s)" % (output, existing, exc.strerror or exc)
    return None
