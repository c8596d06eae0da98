"""Messages to the box's agent (the `echo` template's harness): a turn streamed to its
`result`, and the event log read again from any seq."""

import itertools


def test_a_turn_streams_to_its_result_and_the_log_resumes(make_box):
    box = make_box("chat", template="echo")
    turn = box.send("hello there", id="greeting-1")
    assert turn.message_id == "greeting-1"
    events = list(turn)
    kinds = [e.type for e in events]
    assert kinds[-1] == "result" and turn.result is events[-1], kinds
    assert turn.text == "echo: hello there"
    replay = [e for e in events if e.type == "user"]
    assert replay and replay[0].message_id == "greeting-1", kinds
    assert any(e.type == "assistant" for e in events), kinds

    # The same key again is the same message; a second turn follows the first.
    assert box.send("hello there", id="greeting-1").seq == turn.seq
    second = box.send("stream 3")
    assert second.wait().type == "result"
    assert second.text.startswith("chunk 001 of 003")
    streamed = [e for e in second if e.type == "assistant"]
    assert streamed == []  # a finished turn has nothing more

    # The log again, from after the first result: resumed exactly there.
    after = turn.result.seq
    again = list(itertools.islice(box.events(after=after), 3))
    assert [e.seq for e in again] == [after + 1, after + 2, after + 3]
    page = box.event_page(after=0)
    assert page.events[0].seq == 1 and box.last_event_seq() >= second.result.seq


def test_a_repost_of_an_answered_message_still_reaches_its_result(make_box):
    box = make_box("chat", template="echo")
    first = box.send("just once", id="once-1")
    result = first.wait()
    box.send("something else").wait()  # the log moves on past the first turn

    again = box.send("just once", id="once-1")
    assert (again.seq, again.events_after) == (first.seq, first.events_after)
    assert again.events_after < result.seq
    assert again.wait().seq == result.seq and again.text == first.text == "echo: just once"

    listed = box.messages()
    assert [(m.id, m.state) for m in listed][:1] == [("once-1", "delivered")]
    assert [m.content for m in listed] == ["just once", "something else"]
    assert [m.id for m in box.messages(after=first.seq)] == [listed[1].id]
