"""What both parallel strategies build first: the whole model (identical on
every rank for one seed: --init's, or a fresh one), its local optimizer and
the data arrays on the device. DataParallel trains it as it is,
hybrid.ModelParallel slices it over the ranks."""
import collections

from .. import agreement
from ..errors import UsageError
from ..nnet import create_optimizer
from . import model_files

Whole = collections.namedtuple("Whole", "net header optimizer train held_out")


def model_name(header, config):
    """The model trained: --model's, or the one --init's file holds."""
    return header.get("name", config.model.model)


def build(comm, config, data, xp):
    """Collective: the Whole of this rank; a problem on any rank (a bad
    --init, labels beyond the model's outputs) is one line on every rank."""
    error, whole = None, None
    try:
        whole = _build(config, data, xp)
    except (UsageError, ValueError, OSError) as exc:
        error = exc if isinstance(exc, UsageError) else UsageError(str(exc))
    agreement.agree(comm, error)
    return whole


def _build(config, data, xp):
    net, header = model_files.build_network(config, data, xp)
    optimizer = create_optimizer(config.optimizer.optimizer, **config.optimizer.options())
    if (data.y_eval.size and int(data.y_eval.max()) >= data.num_classes) or \
            (data.y_train.size and int(data.y_train.max()) >= data.num_classes):
        raise UsageError("labels go up to %d but the model has %d outputs" % (
            max(int(data.y_eval.max(initial=0)), int(data.y_train.max(initial=0))),
            data.num_classes))
    return Whole(net, header, optimizer, (xp.asarray(data.x_train), xp.asarray(data.y_train)),
                 (xp.asarray(data.x_eval), xp.asarray(data.y_eval)))
