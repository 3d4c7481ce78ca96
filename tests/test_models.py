import pytest
import torch

from fedcore import models
from fedcore.errors import ConfigError

# The counts the papers state (see fedcore/models.py for the sources).
PAPER_COUNTS = {
    "mcmahan_2nn": 199_210,
    "mcmahan_cnn": 1_663_370,
    "fednnnn_mnist": 431_080,
    "fednnnn_cifar": 1_146_088,
}


@pytest.mark.parametrize("name,count", PAPER_COUNTS.items())
def test_parameter_counts_match_the_papers(name, count):
    assert models.num_trainable(models.build(name)) == count


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_every_model_maps_its_input_to_logits(name):
    shape = models.DEFAULT_INPUT_SHAPE[name]
    model = models.build(name).eval()
    assert model(torch.zeros(2, *shape)).shape == (2, 10)


def test_fedumf_models_follow_feddyn_layouts():
    fcn = models.build("fedumf_fcn")
    assert [m.out_features for m in fcn if isinstance(m, torch.nn.Linear)] == [100, 100, 10]
    cnn = models.build("fedumf_cnn")
    assert [m.out_features for m in cnn if isinstance(m, torch.nn.Linear)] == [384, 192, 10]
    assert [m.kernel_size for m in cnn if isinstance(m, torch.nn.Conv2d)] == [(5, 5), (5, 5)]


def test_models_adapt_to_the_dataset_shape():
    model = models.build("fedumf_cnn", input_shape=(1, 28, 28)).eval()
    assert model(torch.zeros(1, 1, 28, 28)).shape == (1, 10)


def test_unknown_model_names_the_flag():
    with pytest.raises(ConfigError, match="--model"):
        models.build("vgg")
