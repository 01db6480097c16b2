"""GPT-2 (tiny) under Hugging Face's Trainer with torch_compile=True, traced without xlabridge, on the CPU."""
import os, sys, tempfile

# accelerate takes an installed torch_xla for an XLA run whatever use_cpu says (its PartialState picks
# DistributedType.XLA), and its XLA path then fails on a compiled model: prepare() maps the optimizer's
# parameters by name and the compiled model's are prefixed "_orig_mod." (KeyError). USE_TORCH_XLA=0 is
# accelerate's own switch for a plain PyTorch run where torch_xla is installed (the pinned environment).
os.environ.setdefault("USE_TORCH_XLA", "0")
import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

class Tokens(Dataset):
    def __init__(self, n=8, seq=16, vocab=128):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)
    def __len__(self): return len(self.ids)
    def __getitem__(self, i): return {"input_ids": self.ids[i], "labels": self.ids[i]}

torch.manual_seed(0)
config = GPT2Config(vocab_size=128, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
model = GPT2LMHeadModel(config)
backend = sys.argv[1] if len(sys.argv) > 1 else "aot_eager"
with tempfile.TemporaryDirectory() as out:
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=4, max_steps=2, report_to=[],
                             torch_compile=True, torch_compile_backend=backend, use_cpu=True,
                             save_strategy="no", logging_strategy="no", dataloader_num_workers=0)
    Trainer(model=model, args=args, train_dataset=Tokens()).train()
print("xlabridge imported:", "xlabridge" in sys.modules)
