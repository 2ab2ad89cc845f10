"""Settings declare their choices (Enums) and ranges (checks run by __post_init__) in ksearch/config.py;
configs and journals keep the strings they always had."""

import pytest
from omegaconf import OmegaConf

from ksearch.cli.app import ConfigError, compose_config, load_saved_config
from ksearch.config import Policy, SearchConfig, SettingError, problems, to_plain
from ksearch.eval.report import Metric


def test_a_group_built_in_code_refuses_a_bad_value_with_every_problem_named():
    with pytest.raises(SettingError) as e:
        SearchConfig(max_rounds=0, max_difficulty=9)
    assert e.value.problems == ["search.max_rounds=0: must be a positive integer",
                                "search.max_difficulty=9: must be <= 5"]
    assert SearchConfig(policy=Policy.greedy).policy == "greedy"


def test_choices_are_members_in_the_config_and_their_strings_outside_it(tmp_path):
    cfg = compose_config(["search.policy=random", "eval.metric=call_latency"])
    assert cfg.search.policy is Policy.random and cfg.eval.metric is Metric.call_latency
    plain = to_plain(cfg)
    assert type(plain["search"]["policy"]) is str and plain["search"]["policy"] == "random"
    assert type(plain["logger"]) is str and plain["logger"] == "none"
    text = OmegaConf.to_yaml(cfg)
    assert "policy: random" in text and "metric: call_latency" in text and "logger: none" in text


def test_a_saved_config_is_checked_like_an_override(tmp_path):
    text = OmegaConf.to_yaml(compose_config([]))
    (tmp_path / "config.yaml").write_text(text.replace("policy: learned", "policy: bogus"))
    with pytest.raises(ConfigError, match=r"^search.policy=bogus: must be one of learned \| greedy \| random$"):
        load_saved_config(tmp_path, [])
    (tmp_path / "config.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"^search.parallel=0: must be a positive integer$"):
        load_saved_config(tmp_path, ["search.parallel=0"])
    assert load_saved_config(tmp_path, ["search.policy=greedy"]).search.policy is Policy.greedy


def test_problems_of_every_group_are_reported_together():
    cfg = OmegaConf.merge(compose_config([]), {"search": {"max_rounds": 0}, "eval": {"trials": 0, "device": "tpu"},
                                               "llm": {"kind": "litellm"}})
    assert problems(cfg) == ["llm=litellm needs llm.model=<provider>/<model> (e.g. openai/gpt-5.2)",
                             "search.max_rounds=0: must be a positive integer",
                             "eval.device=tpu: must be auto | cpu | cuda | cuda:N",
                             "eval.trials=0: must be a positive integer"]
