from mambaxfer_cli.render.id_runs import compact, runs


def test_runs_find_arithmetic_progressions():
    assert runs([400008, 420008, 440008, 460008]) == ["400008..460008 step 20000"]
    assert runs([1, 2, 3, 4, 9]) == ["1..4", "9"]
    assert runs([5, 7]) == ["5", "7"]
    assert runs([]) == []


def test_compact_truncates_long_lists():
    text = compact([1, 5, 2, 8, 3, 9, 4, 11, 6, 20], limit=3)
    assert text.startswith("1, 5, 2, …") and "more runs" in text
