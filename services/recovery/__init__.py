"""Recovery tooling adapters: ``imprint replay|recover|export`` over the Publication log."""
