"""Procedure ids are version-7 UUIDs: the Unix milliseconds first, so ids sort by the time they were made."""

import time
import uuid

from django_procedures.policy.ids import new_id, short_id


def test_an_id_is_a_version_7_rfc_9562_uuid_carrying_the_millisecond_it_was_made():
    before = time.time_ns() // 1_000_000
    made = new_id()
    after = time.time_ns() // 1_000_000
    assert (made.version, made.variant) == (7, uuid.RFC_4122)
    assert before <= made.int >> 80 <= after


def test_ids_of_later_milliseconds_sort_after_as_uuids_and_as_text():
    earlier = new_id()
    time.sleep(0.002)
    later = new_id()
    assert earlier < later and str(earlier) < str(later) and earlier.bytes < later.bytes


def test_ids_of_one_millisecond_differ_in_their_random_bits():
    ids = [new_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    randoms = {i.int & ((1 << 62) - 1) for i in ids}
    assert len(randoms) == len(ids)  # 62 of the 74 random bits alone already tell them apart


def test_the_short_form_the_admin_shows_is_the_random_end_so_ids_of_one_minute_differ_in_it():
    ids = [new_id() for _ in range(1_000)]
    assert len({short_id(i) for i in ids}) == len(ids)
    assert short_id(ids[0]) == str(ids[0])[-8:] == short_id(str(ids[0]))
    older = uuid.uuid4()  # procedures made before version-7 ids: their end is random too
    assert short_id(older) == str(older)[-8:]
