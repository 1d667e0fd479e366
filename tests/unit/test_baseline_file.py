"""A stored baseline that cannot be read is named with its problem in one readable line."""

import pytest

from llmgate.store import benchmark_files


def test_truncated_baseline_is_named_once_with_line_and_column(tmp_path):
    path = tmp_path / "0001_base.json"
    path.write_text('{\n  "benchmarks": [\n    {"fullname": "test_x[e]::decode_tok_s", "name": "cut sh')
    with pytest.raises(benchmark_files.BaselineError) as e:
        benchmark_files.validate_file(path)
    msg = str(e.value)
    assert f"{path}: not valid JSON: Unterminated string starting at: line 3 column 53 " in msg, msg
    assert " at at " not in msg
