"""Neural networks, Kaldi nnet1 style: components over one flat parameter
buffer, losses, local optimizers and model builders (see network.py for the
trainer-facing interface)."""
from .activations import ReLU, Sigmoid, Softmax, Tanh
from .affine import AffineTransform
from .batchnorm import BatchNorm
from .component import Component
from .conv import Conv1d, MaxPool1d
from .dropout import Dropout
from .loss import LOSSES, MSE, CrossEntropy, get_loss
from .lstm import LSTM
from .models import MODELS, build_model
from .network import Network
from .optimizers import OPTIMIZERS, create_optimizer, momentum_option
from .reshape import Flatten, LastFrame, Reshape
from .splice import Splice

__all__ = [
    "AffineTransform", "BatchNorm", "Component", "Conv1d", "CrossEntropy", "Dropout",
    "Flatten", "LastFrame", "LOSSES", "LSTM", "MaxPool1d", "MODELS", "MSE", "Network",
    "OPTIMIZERS", "ReLU", "Reshape", "Sigmoid", "Softmax", "Splice", "Tanh",
    "build_model", "create_optimizer", "get_loss", "momentum_option",
]
