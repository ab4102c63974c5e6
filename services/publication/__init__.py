"""Publication: candidate bodies → committed block revisions in the Publication log."""
