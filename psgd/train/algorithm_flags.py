"""The synchronization flags, derived from the algorithms' declared options
(psgd/algorithms/base.py Option): an option is declared once, beside its
algorithm's math, and gets its flag, choices, help and resume behaviour here.

    --name-with-dashes VALUE       float (finite in float32), int, or one of a tuple
    --name / --no-name             bool
"""
import collections

from ..algorithms import REGISTRY

Flag = collections.namedtuple("Flag", "dest option kind declared")


def _declared():
    """dest -> Flag, in the order users see the algorithms."""
    flags = {}
    for algo, cls in REGISTRY.items():
        for name, opt in cls.OPTIONS.items():
            if opt.flag is False:
                continue
            dest = opt.flag or name
            flag = flags.get(dest)
            if flag is None:
                flags[dest] = flag = Flag(dest, name, opt.kind, {})
            elif flag.option != name or flag.kind != opt.kind:
                raise TypeError("flag --%s is declared as %s option %r (%s) and as %r (%s): give "
                                "one of them another flag=" % (
                                    dest, algo, name, opt.kind, flag.option, flag.kind))
            flag.declared[algo] = opt.help
    return flags


FLAGS = _declared()
# flag dest -> the algorithm option it sets (passed to psgd.create only when given)
ALGORITHM_FLAGS = {dest: flag.option for dest, flag in FLAGS.items()}


def option_name(dest):
    return "--" + dest.replace("_", "-")


def help_text(flag):
    """`bsp: ...`, or `asgd/masgd: ...` where they share the text."""
    by_text = {}
    for algo, text in flag.declared.items():
        by_text.setdefault(text or "", []).append(algo)
    return "; ".join("%s: %s" % ("/".join(algos), text) if text else "/".join(algos)
                     for text, algos in by_text.items())


def add_to(group, finite_float):
    """Add every algorithm option's flag to the argparse `group`; float
    values go through `finite_float`."""
    for dest, flag in FLAGS.items():
        name, text = option_name(dest), help_text(flag)
        if flag.kind is bool:
            group.add_argument(name, dest=dest, action="store_const", const=True, default=None,
                               help=text)
            group.add_argument("--no-" + name[2:], dest=dest, action="store_const", const=False,
                               help="the opposite of " + name)
        elif isinstance(flag.kind, tuple):
            group.add_argument(name, dest=dest, choices=flag.kind, help=text)
        else:
            group.add_argument(name, dest=dest, type=finite_float if flag.kind is float else int,
                               metavar="X" if flag.kind is float else "K", help=text)
