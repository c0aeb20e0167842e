"""A cluster's live state: the merge preconditions judged against it, and its drift from the default branch."""
