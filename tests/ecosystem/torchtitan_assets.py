"""Stand-ins, built offline, for the two assets torchtitan's debug configuration reads from its source tree.

torchtitan's ``llama3_debugmodel`` reads a Hugging Face tokenizer from ``hf_assets_path``
(``tokenizer.json`` and ``tokenizer_config.json``) and the ``c4_test`` dataset (a directory of JSON lines
with a ``text`` field, opened with ``datasets.load_dataset``). Both live in torchtitan's repository, not
in its wheel, and this machine has no internet. So this script makes small ones of its own:

- the text is the docstrings of a fixed list of Python standard library modules, which every Python of
  this version has, so the files are the same on every machine with the same Python;
- the tokenizer is a byte-level BPE trained on that text with the ``tokenizers`` library, with the
  debug model's vocabulary size (2048) and Llama 3's names for the begin/end-of-text tokens;
- the dataset is that text, one JSON object per docstring, in ``c4_test/docstrings.json`` (a name
  without "test" in it: ``datasets`` would take such a file for a test split).

Neither is torchtitan's: the loss values differ from torchtitan's published debug-model curves, but the
model, its shapes and the work per step are the same.

For sizing runs (``openreg_titan``'s configurations in timing-only execution) ``c4_long/`` holds the same
text as 32 documents of about 257,000 tokens each (the whole text, each rotated to start elsewhere): every
row of a batch then lies inside one document, so varlen attention costs what full causal attention over
the row does, on every rank alike, as in torchtitan's published H100 runs (SDPA with is_causal over the
whole sequence). With the docstrings' short documents a row holds dozens of documents and its attention
costs a fraction of that, different on each rank.

Usage: ``python torchtitan_assets.py DIR`` writes ``DIR/tokenizer/``, ``DIR/c4_test/`` and
``DIR/c4_long/`` (and does nothing when all are there already).
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import tempfile
import warnings

VOCAB_SIZE = 2048  # the debug model's vocab_size
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
LONG_DOCUMENTS = 32  # c4_long's documents: at least one per rank of the runs made as processes

# Modules whose docstrings make the text: pure-Python, always present, plenty of English prose.
_MODULES = (
    "argparse", "asyncio", "collections", "concurrent.futures", "configparser", "contextlib", "csv",
    "dataclasses", "datetime", "decimal", "difflib", "email", "enum", "fractions", "functools", "gettext",
    "heapq", "http.client", "http.server", "imaplib", "inspect", "ipaddress", "json", "logging", "mailbox",
    "multiprocessing", "numbers", "optparse", "pathlib", "pickle", "pprint", "pydoc", "random", "re",
    "shutil", "smtplib", "socket", "statistics", "string", "subprocess", "tarfile", "tempfile", "textwrap",
    "threading", "tkinter", "typing", "unittest", "urllib.parse", "urllib.request", "uuid", "warnings",
    "zipfile",
)


def _docstrings() -> list[str]:
    """Every docstring of the modules above, their classes, functions and methods, in a fixed order."""
    texts: list[str] = []
    seen: set[int] = set()

    def add(obj) -> None:
        doc = inspect.getdoc(obj) if id(obj) not in seen else None
        seen.add(id(obj))
        if doc and len(doc) > 40:
            texts.append(doc)

    with warnings.catch_warnings():  # reading typing's deprecated aliases warns
        warnings.simplefilter("ignore")
        for name in _MODULES:
            try:
                module = importlib.import_module(name)
            except ImportError:  # tkinter may be missing from a minimal Python; the rest is plenty
                continue
            add(module)
            for attr in sorted(vars(module)):
                obj = getattr(module, attr)
                if getattr(obj, "__module__", None) != module.__name__:
                    continue
                add(obj)
                if inspect.isclass(obj):
                    for member in sorted(vars(obj)):
                        add(getattr(obj, member, None))
    return texts


def build(root: str) -> None:
    """Writes ``root/tokenizer``, ``root/c4_test`` and ``root/c4_long`` unless all exist; each appears whole
    or not at all."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer_dir, dataset_dir = os.path.join(root, "tokenizer"), os.path.join(root, "c4_test")
    long_dir = os.path.join(root, "c4_long")
    if os.path.isdir(tokenizer_dir) and os.path.isdir(dataset_dir) and os.path.isdir(long_dir):
        return
    os.makedirs(root, exist_ok=True)
    texts = _docstrings()

    with tempfile.TemporaryDirectory(dir=root) as scratch:
        tok_tmp = os.path.join(scratch, "tokenizer")
        os.makedirs(tok_tmp)
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=VOCAB_SIZE,
            special_tokens=[BOS, EOS],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tokenizer.train_from_iterator(texts, trainer=trainer)
        tokenizer.save(os.path.join(tok_tmp, "tokenizer.json"))
        with open(os.path.join(tok_tmp, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": BOS, "eos_token": EOS, "add_bos_token": True, "add_eos_token": True}, f)

        data_tmp = os.path.join(scratch, "c4_test")
        os.makedirs(data_tmp)
        with open(os.path.join(data_tmp, "docstrings.json"), "w") as f:
            for text in texts:
                f.write(json.dumps({"text": text}) + "\n")

        long_tmp = os.path.join(scratch, "c4_long")
        os.makedirs(long_tmp)
        whole = "\n\n".join(texts)
        with open(os.path.join(long_tmp, "docstrings.json"), "w") as f:
            for k in range(LONG_DOCUMENTS):
                cut = k * len(whole) // LONG_DOCUMENTS
                f.write(json.dumps({"text": whole[cut:] + "\n\n" + whole[:cut]}) + "\n")

        for tmp, final in ((tok_tmp, tokenizer_dir), (data_tmp, dataset_dir), (long_tmp, long_dir)):
            if not os.path.isdir(final):
                os.rename(tmp, final)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DIR")
    build(sys.argv[1])
