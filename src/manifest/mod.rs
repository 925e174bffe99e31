//! Reading Feature/Task manifests from YAML files, with errors naming file, document and task.
