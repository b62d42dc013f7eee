"""Chapter 21 checkers: they accept the solutions of book/solutions/ch21.md and reject
typical mistakes with a message that says what is wrong."""
import pytest

from grpo_lib.exercises.ch21 import (check_loss_agg, check_split, check_verl_row,
                                     reference_split)


def solution_split(per_step_prompts, num_generations, micro_batch_size,
                   num_processes):
    if per_step_prompts % num_processes:
        raise ValueError("a group would be cut between processes")
    share = per_step_prompts * num_generations // num_processes
    micro = min(micro_batch_size or share, share)
    return micro, share // micro


def solution_verl_row(row, task, split, index):
    answer = str(row["answer"])
    return {"data_source": f"grpo_lib/{task}",
            "prompt": [{"role": m["role"], "content": m["content"]}
                       for m in row["prompt"]],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split, "index": index,
                           "question": row["question"], "answer": answer}}


def test_checkers_accept_the_solutions():
    assert check_split(solution_split) is True
    assert check_verl_row(solution_verl_row) is True
    assert check_loss_agg(lambda t: {"grpo": "seq-mean-token-mean",
                                     "dapo": "token-mean",
                                     "dr_grpo": "seq-mean-token-sum-norm"}[t])


def test_split_mistakes_are_named():
    def one_process(P, G, m, n):
        B = P * G
        return (m or B), B // (m or B)

    def no_cap(P, G, m, n):
        if P % n:
            raise ValueError
        share = P * G // n
        micro = m or share
        return micro, max(1, share // micro)

    with pytest.raises(AssertionError, match="one-process answer"):
        check_split(one_process)
    with pytest.raises(AssertionError, match="larger than a process's share"):
        check_split(no_cap)
    with pytest.raises(AssertionError, match="raise ValueError"):
        check_split(lambda P, G, m, n: reference_split(P - P % n or n, G, m, n))


def test_verl_row_and_loss_mistakes_are_named():
    def answer_only(row, task, split, index):
        out = solution_verl_row(row, task, split, index)
        return {**out, "reward_model": row["answer"]}

    with pytest.raises(AssertionError, match="ground_truth"):
        check_verl_row(answer_only)
    with pytest.raises(AssertionError, match="averages each completion"):
        check_loss_agg(lambda t: "token-mean")
