//! What `tests/deploy.rs` and `tests/image.rs` share: the venv holding the manifest tools,
//! rendering an overlay with `tests/deploy/manifests.py`, and the facts it reports about a
//! rendered overlay (the sidecar's tickd container, NetworkPolicies), the sidecar's read back
//! through tickd's own `Config` so a flag the binary does not know fails the test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use clap::{CommandFactory, Parser};
use tickd::config::Config;

use crate::common::tooling::{must, python_venv, repo};

const SIDECAR: &str = "deploy/overlays/sidecar";

/// `target/deploy-venv` with exactly the pinned requirements; returns its `bin/` directory.
pub(crate) fn ensure_venv() -> PathBuf {
    let python = python_venv("deploy-venv", &repo().join("tests/deploy/requirements.txt"))
        .unwrap_or_else(|failure| panic!("{failure}"));
    python.parent().expect("bin/python").to_path_buf()
}

/// `tests/deploy/manifests.py` under the venv's Python.
pub(crate) fn manifests_py(bin: &Path) -> Command {
    let mut command = Command::new(bin.join("python"));
    command
        .arg(repo().join("tests/deploy/manifests.py"))
        .current_dir(repo())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("PYTHONPATH")
        .env_remove("PYTHONHOME");
    command
}

/// Renders `overlay` with manifests.py into `out/<overlay name>.yaml`.
pub(crate) fn render(bin: &Path, overlay: &Path, out: &Path) -> PathBuf {
    let name = overlay.file_name().expect("overlay name").to_string_lossy();
    let rendered = out.join(format!("{name}.yaml"));
    let mut render = manifests_py(bin);
    render.arg("render").arg(overlay).arg(&rendered);
    must(render);
    rendered
}

/// Tab-separated facts printed by a manifests.py subcommand, one per line.
pub(crate) struct Facts(Vec<Vec<String>>);

impl Facts {
    /// `manifests.py SUBCOMMAND ARGS...`, read as facts.
    pub(crate) fn from_manifests_py(bin: &Path, args: &[&std::ffi::OsStr]) -> Self {
        let mut command = manifests_py(bin);
        command.args(args);
        let output = must(command);
        let facts = String::from_utf8(output.stdout)
            .expect("utf-8 facts")
            .lines()
            .map(|line| line.split('\t').map(str::to_owned).collect())
            .collect();
        Self(facts)
    }

    /// Every fact whose fields start with `prefix`, without the prefix.
    pub(crate) fn all(&self, prefix: &[&str]) -> Vec<&[String]> {
        self.0
            .iter()
            .filter(|fields| {
                fields.len() >= prefix.len() && fields.iter().zip(prefix).all(|(a, b)| a == b)
            })
            .map(|fields| &fields[prefix.len()..])
            .collect()
    }

    pub(crate) fn one(&self, prefix: &[&str]) -> String {
        match self.all(prefix).as_slice() {
            [rest] => rest.join("\t"),
            other => panic!("expected one {prefix:?} fact, found {other:?}"),
        }
    }
}

/// What manifests.py says about the sidecar overlay's tickd container.
pub(crate) struct Sidecar {
    pub(crate) facts: Facts,
}

impl Sidecar {
    pub(crate) fn load() -> Self {
        let bin = ensure_venv();
        let out = tempfile::tempdir().expect("temp dir");
        let rendered = render(&bin, &repo().join(SIDECAR), out.path());
        let facts = Facts::from_manifests_py(&bin, &["facts".as_ref(), rendered.as_os_str()]);
        Self { facts }
    }

    pub(crate) fn all(&self, prefix: &[&str]) -> Vec<&[String]> {
        self.facts.all(prefix)
    }

    pub(crate) fn one(&self, prefix: &[&str]) -> String {
        self.facts.one(prefix)
    }

    pub(crate) fn args(&self) -> Vec<String> {
        self.all(&["arg"])
            .into_iter()
            .map(|rest| rest.join("\t"))
            .collect()
    }

    pub(crate) fn env(&self) -> BTreeMap<String, String> {
        self.all(&["env"])
            .into_iter()
            .map(|rest| (rest[0].clone(), rest[1..].join("\t")))
            .collect()
    }

    /// Mounts as (mount path, volume source).
    pub(crate) fn mounts(&self) -> Vec<(PathBuf, String)> {
        self.all(&["mount"])
            .into_iter()
            .map(|rest| (PathBuf::from(&rest[0]), rest[1].clone()))
            .collect()
    }

    /// The value tickd would use for flag `--long`: from the args, else from its
    /// environment variable, else None (the default).
    pub(crate) fn flag(&self, long: &str) -> Option<String> {
        let prefix = format!("--{long}=");
        if let Some(value) = self.args().iter().find_map(|a| a.strip_prefix(&prefix)) {
            return Some(value.to_owned());
        }
        let env = format!("TICKD_{}", long.replace('-', "_").to_uppercase());
        self.env().get(&env).cloned()
    }

    /// The configuration tickd builds from these args and env, parsed by tickd's own
    /// `Config` (so an unknown or malformed flag fails here). Env applies only where no
    /// arg gives the flag, as in clap.
    pub(crate) fn config(&self) -> Config {
        let args = self.args();
        let env = self.env();
        let mut argv = vec!["tickd".to_owned()];
        for arg in Config::command().get_arguments() {
            let (Some(long), Some(name)) = (arg.get_long(), arg.get_env()) else {
                continue;
            };
            let given = args
                .iter()
                .any(|a| a == &format!("--{long}") || a.starts_with(&format!("--{long}=")));
            if let Some(value) = env.get(name.to_str().unwrap_or_default()) {
                if !given {
                    argv.push(format!("--{long}={value}"));
                }
            }
        }
        argv.extend(args);
        Config::try_parse_from(&argv).unwrap_or_else(|error| {
            panic!("the sidecar's args and env do not parse as tickd flags ({argv:?}):\n{error}")
        })
    }

    /// The container's memory limit in bytes (`resources.limits.memory`), if it sets one.
    pub(crate) fn memory_limit(&self) -> Option<u64> {
        let limit = self.one(&["memory_limit"]);
        (!limit.is_empty()).then(|| {
            limit
                .parse::<tickd::budget::ByteCount>()
                .unwrap_or_else(|error| panic!("memory limit {limit:?}: {error}"))
                .bytes()
        })
    }

    pub(crate) fn grace(&self) -> Duration {
        Duration::from_secs(self.one(&["grace"]).parse().expect("grace seconds"))
    }

    /// The port the kubelet's probes use: the same number in all three (checked by
    /// tests/deploy.rs).
    pub(crate) fn probe_port(&self) -> u16 {
        let port = self.one(&["probe", "liveness", "port"]);
        port.parse()
            .unwrap_or_else(|_| panic!("livenessProbe port {port:?} is not a number"))
    }
}
