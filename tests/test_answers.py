"""short_answer: what exact match is scored on."""

import pytest

from nlqo.execution.answers import short_answer


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The answer is: Charles Babbage", "Charles Babbage"),
        ("answer: Haarlem.", "Haarlem"),
        ("The final answer is: no, it is not.", "no"),
        ('  Answer:  "Summer Wars" is from Japan.', "Summer Wars"),
        ("Answer Me", "Answer Me"),
        ("The Answer Is Blowing in the Wind", "The Answer Is Blowing in the Wind"),
        ("Final Answer: ", "Final Answer:"),
    ],
)
def test_a_lead_in_before_the_answer_is_dropped_only_with_its_colon(text, expected):
    assert short_answer(text) == expected
