//! Custom resources `Feature` and `Task` (group `ralph.dev`, version `v1alpha1`).
