"""`TrainingRun._save_best` on two real processes: the best model is written to `.tmp-best/` by
`save_pretrained` on every rank (transformers creates and lists the folder on each one) and renamed to
`best/` by the main process. A `make test-slow` run of 2026-12-06 failed in
`test_on_two_processes_a_run_resumed_in_the_middle_stops_at_the_same_step`: rank 1 was still listing
`.tmp-best/` when rank 0 had renamed it (FileNotFoundError). Here rank 1's listing is made 3 s slow, so
the rename always comes first unless the processes wait for each other before it."""

import json

from transformers import BertModel

from conftest import launch

HELPER = '''
import logging, os, sys, time, types
from pathlib import Path

import transformers.modeling_utils as modeling_utils
from accelerate import Accelerator
from transformers import BertConfig, BertModel

from common.run import TrainingRun

output_dir = Path(sys.argv[1])
accelerator = Accelerator()
config = BertConfig(vocab_size=32, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
model = accelerator.prepare(BertModel(config))
if accelerator.process_index == 1:  # rank 1 lists the save folder late (only inside save_pretrained)
    real_listdir = os.listdir

    def slow_listdir(path):
        print(f"rank 1 lists {Path(path).name} late", flush=True)
        time.sleep(3)
        return real_listdir(path)

    slow_os = types.SimpleNamespace(**vars(os))
    slow_os.listdir = slow_listdir
    modeling_utils.os = slow_os

run = TrainingRun.__new__(TrainingRun)  # only what _save_best reads
run.accelerator, run.logger = accelerator, logging.getLogger()
run.args = types.SimpleNamespace(output_dir=str(output_dir))
run._model, run._processor = model, None
run.best = {"value": 0.75, "step": 4, "epoch": 0, "patience_count": 0}
run._save_best("accuracy")
accelerator.wait_for_everyone()
accelerator.end_training()
'''


def test_best_model_is_renamed_only_after_every_process_has_saved(tmp_path):
    helper = tmp_path / "save_best.py"
    helper.write_text(HELPER)
    out = tmp_path / "out"
    result = launch(helper, [out], num_processes=2, check=False, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:]
    assert "rank 1 lists .tmp-best late" in result.stdout  # the delay took effect inside save_pretrained
    assert sorted(p.name for p in out.iterdir()) == ["best"]  # no half-written .tmp-best/ left behind
    assert (out / "best" / "model.safetensors").is_file()
    assert json.loads((out / "best" / "best.json").read_text()) == {
        "metric": "accuracy", "value": 0.75, "step": 4, "epoch": 0}
    assert BertModel.from_pretrained(out / "best").config.hidden_size == 8
