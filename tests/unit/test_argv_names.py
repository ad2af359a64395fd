from launch.argv import normalize_flag_names


def test_dashes_in_names_become_underscores():
    assert normalize_flag_names(["--fusion-threshold-mb=64", "--batch-size", "32"]) == [
        "--fusion_threshold_mb=64", "--batch_size", "32"]


def test_values_and_positionals_are_untouched():
    argv = ["--run_dir=/tmp/my-run", "--model", "gpt:layers=2", "-x", "my-host", "--", "--a-b"]
    assert normalize_flag_names(argv) == argv


def test_underscored_names_pass_through():
    assert normalize_flag_names(["--model=digits_cnn", "--nojit"]) == ["--model=digits_cnn", "--nojit"]
