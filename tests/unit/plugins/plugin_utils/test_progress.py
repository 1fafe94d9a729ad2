"""Progress lines of a pull: rsync's --info=progress2 output and the script's own notes."""

from __future__ import annotations

from ansible_collections.vllm_omni.serve.plugins.plugin_utils._progress import latest, progress_line

RSYNC = ("\r              0   0%    0.00kB/s    0:00:00  \r    536,870,912  16%  255.98MB/s    0:00:10  "
         "\r  1,207,959,552  37%  310.52MB/s    0:00:06 (xfr#1, to-chk=2/5)")


def test_the_newest_rsync_line_gives_bytes_of_total_rate_and_time_left():
    line = progress_line("lab-2", "model-x", RSYNC, 3_221_225_472, 4.0)
    assert line == "lab-2: model-x: 1.21 of 3.22 GB (37%), 310.52MB/s, 0:00:06 left"


def test_without_a_total_the_line_still_says_how_far_it_got():
    assert progress_line("h", "a", RSYNC, None, 1.0) == "h: a: 1.21 GB (37%), 310.52MB/s, 0:00:06 left"


def test_the_scripts_own_note_is_shown_with_the_time_so_far():
    note = "checking 5 files (3.22 GB) against the manifest\n"
    assert progress_line("h", "a", note, 3_221_225_472, 12.4) == "h: a: checking 5 files (3.22 GB) against the manifest (12 s)"


def test_an_empty_file_says_nothing():
    assert progress_line("h", "a", "", 10, 1.0) is None
    assert latest("\r\n \r") == ""
