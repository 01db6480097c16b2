"""Real model code for tests and benchmarks, built from small configs (no weights downloaded).

Each factory returns ``(model, make_inputs)``: ``make_inputs(device)`` builds a fresh, seeded
batch of keyword arguments, including labels so a training step has a loss.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

Inputs = dict[str, torch.Tensor]
ModelFactory = Callable[[], tuple[torch.nn.Module, Callable[[torch.device], Inputs]]]

_BATCH, _SEQ, _VOCAB = 2, 16, 128


def _token_batch(device: torch.device, *, with_labels: bool = True) -> Inputs:
    generator = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, _VOCAB, (_BATCH, _SEQ), generator=generator)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if with_labels:
        batch["labels"] = ids.clone()
    return {k: v.to(device) for k, v in batch.items()}


def gpt2() -> tuple[torch.nn.Module, Callable[[torch.device], Inputs]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=_VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )
    return GPT2LMHeadModel(config), _token_batch


def bert() -> tuple[torch.nn.Module, Callable[[torch.device], Inputs]]:
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=64,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    return BertForMaskedLM(config), _token_batch


def roberta() -> tuple[torch.nn.Module, Callable[[torch.device], Inputs]]:
    from transformers import RobertaConfig, RobertaForMaskedLM

    config = RobertaConfig(
        vocab_size=_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=64 + 2, pad_token_id=1,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    return RobertaForMaskedLM(config), _token_batch


def llama() -> tuple[torch.nn.Module, Callable[[torch.device], Inputs]]:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )
    return LlamaForCausalLM(config), _token_batch


def t5() -> tuple[torch.nn.Module, Callable[[torch.device], Inputs]]:
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(
        vocab_size=_VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
        num_heads=4, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0,
    )
    return T5ForConditionalGeneration(config), _token_batch


def resnet18() -> tuple[torch.nn.Module, Callable[[torch.device], Inputs]]:
    import torchvision

    def make_inputs(device: torch.device) -> Inputs:
        generator = torch.Generator().manual_seed(1234)
        images = torch.randn(2, 3, 32, 32, generator=generator)
        return {"x": images.to(device)}

    return torchvision.models.resnet18(num_classes=10), make_inputs


FACTORIES: dict[str, ModelFactory] = {
    "gpt2": gpt2,
    "bert": bert,
    "roberta": roberta,
    "llama": llama,
    "t5": t5,
    "resnet18": resnet18,
}


def build(name: str, device: torch.device, *, seed: int = 0) -> tuple[torch.nn.Module, Inputs]:
    """The named model with seeded weights on ``device``, and one batch for it."""
    torch.manual_seed(seed)
    model, make_inputs = FACTORIES[name]()
    return model.to(device), make_inputs(device)


def without_labels(model: torch.nn.Module, inputs: Inputs) -> Inputs:
    """The batch for inference: labels dropped; an encoder-decoder gets its decoder inputs."""
    batch = {k: v for k, v in inputs.items() if k != "labels"}
    config = getattr(model, "config", None)
    if getattr(config, "is_encoder_decoder", False):
        batch["decoder_input_ids"] = inputs["input_ids"]
    return batch


def loss_of(output: Any) -> torch.Tensor:
    """A scalar loss from a model's output: the HF loss when labels were given, else a sum."""
    loss = getattr(output, "loss", None)
    if loss is not None:
        return loss
    logits = output if isinstance(output, torch.Tensor) else output.logits
    return logits.float().pow(2).mean()
