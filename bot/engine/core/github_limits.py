"""GitHub's size limits, in one place: every writer of a comment, issue, status or check run imports them."""

MAX_COMMENT = 65536  # characters of a comment, an issue body or a pull request body
MAX_STATUS_DESCRIPTION = 140  # characters of a commit status description
MAX_CHECK_TITLE = 255  # characters of a check run's output title
MAX_CHECK_TEXT = 65535  # characters of a check run's output summary, and of its text
ANNOTATIONS_PER_REQUEST = 50  # check run annotations one create or update request may carry
