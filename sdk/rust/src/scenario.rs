//! The run instruction: markers and settings from the `ETLSTAGE_*` environment.

use crate::error::Error;

/// The four marker bytes of a stage (docs/protocol.md: markers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Markers {
    pub eom: u8,
    pub eop: u8,
    pub eob: u8,
    pub bnc: u8,
}

impl Default for Markers {
    fn default() -> Self {
        Markers { eom: 0x0a, eop: 0x00, eob: 0x17, bnc: 0x11 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageType {
    E,
    T,
    L,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Plain,
    Cyclic,
    Single,
    Batch,
}

/// Everything a worker learns from its environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    pub stage_type: StageType,
    pub mode: Mode,
    pub batch_size: usize,
    /// Batch mode: the worker closes each batch (BNC) rather than the supervisor (EOB).
    pub worker_driven: bool,
    /// Cyclic E: the worker keeps its own offsets (the request is an empty message).
    pub worker_offsets: bool,
    pub markers: Markers,
    pub stage: String,
    pub instance: u32,
    pub instances: u32,
    pub state_dir: String,
    /// L batch mode: each batch opens with its id (`ETLSTAGE_BATCH_ID=1`; docs/protocol.md: batch ids).
    pub batch_id: bool,
}

impl Scenario {
    /// The scenario of this process (`ETLSTAGE_*`, defaults for what is unset).
    pub fn from_env() -> Result<Scenario, Error> {
        Scenario::from_vars(std::env::vars())
    }

    /// The scenario from `(name, value)` pairs; names other than `ETLSTAGE_*` are ignored.
    pub fn from_vars<I, K, V>(vars: I) -> Result<Scenario, Error>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut get = std::collections::HashMap::new();
        for (k, v) in vars {
            if let Some(name) = k.as_ref().strip_prefix("ETLSTAGE_") {
                if !v.as_ref().is_empty() {
                    get.insert(name.to_string(), v.as_ref().to_string());
                }
            }
        }
        let text = |name: &str, default: &str| get.get(name).cloned().unwrap_or_else(|| default.to_string());
        let bad = |name: &str, value: &str, want: &str| {
            Error::Config(format!("ETLSTAGE_{name}={value:?}: expected {want}"))
        };
        let stage_type = match text("TYPE", "T").as_str() {
            "E" => StageType::E,
            "T" => StageType::T,
            "L" => StageType::L,
            v => return Err(bad("TYPE", v, "one of E, T, L")),
        };
        let default_mode = if stage_type == StageType::E { "plain" } else { "single" };
        let mode = match (stage_type, text("MODE", default_mode).as_str()) {
            (StageType::E, "plain") => Mode::Plain,
            (StageType::E, "cyclic") => Mode::Cyclic,
            (StageType::T | StageType::L, "single") => Mode::Single,
            (StageType::T | StageType::L, "batch") => Mode::Batch,
            (StageType::E, v) => return Err(bad("MODE", v, "one of plain, cyclic for an E-stage")),
            (_, v) => return Err(bad("MODE", v, "one of single, batch for a T- or L-stage")),
        };
        let number = |name: &str, default: &str, least: u64| -> Result<u64, Error> {
            let v = text(name, default);
            match v.parse::<u64>() {
                Ok(n) if n >= least => Ok(n),
                _ => Err(bad(name, &v, &format!("an integer >= {least}"))),
            }
        };
        let batch_size = number("BATCH_SIZE", "1", 1)? as usize;
        let instance = number("INSTANCE", "0", 0)? as u32;
        let instances = number("INSTANCES", "1", 1)? as u32;
        let worker_driven = match text("BATCH_DRIVER", "supervisor").as_str() {
            "supervisor" => false,
            "worker" => true,
            v => return Err(bad("BATCH_DRIVER", v, "one of supervisor, worker")),
        };
        let worker_offsets = match text("OFFSETS", "worker").as_str() {
            "worker" => true,
            "supervisor" => false,
            v => return Err(bad("OFFSETS", v, "one of worker, supervisor")),
        };
        let mut markers = Markers::default();
        for (name, slot) in [
            ("EOM", &mut markers.eom),
            ("EOP", &mut markers.eop),
            ("EOB", &mut markers.eob),
            ("BNC", &mut markers.bnc),
        ] {
            if let Some(v) = get.get(name) {
                *slot = u8::from_str_radix(v, 16).map_err(|_| bad(name, v, "two hex digits such as 0a"))?;
            }
        }
        let m = [markers.eom, markers.eop, markers.eob, markers.bnc];
        if (0..4).any(|i| (i + 1..4).any(|j| m[i] == m[j])) {
            return Err(Error::Config(format!(
                "markers eom=0x{:02x} eop=0x{:02x} eob=0x{:02x} bnc=0x{:02x}: the four must differ",
                m[0], m[1], m[2], m[3]
            )));
        }
        Ok(Scenario {
            stage_type,
            mode,
            batch_size,
            worker_driven: mode == Mode::Batch && worker_driven,
            worker_offsets,
            markers,
            stage: text("STAGE", "stage"),
            instance,
            instances,
            state_dir: text("STATE_DIR", ""),
            batch_id: text("BATCH_ID", "0") == "1",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_setting_and_names_a_bad_one() {
        let sc = Scenario::from_vars([
            ("ETLSTAGE_TYPE", "L"),
            ("ETLSTAGE_MODE", "batch"),
            ("ETLSTAGE_BATCH_SIZE", "7"),
            ("ETLSTAGE_BATCH_DRIVER", "worker"),
            ("ETLSTAGE_EOM", "7c"),
            ("ETLSTAGE_STAGE", "load"),
            ("ETLSTAGE_INSTANCE", "1"),
            ("ETLSTAGE_INSTANCES", "2"),
            ("PATH", "/bin"),
        ])
        .unwrap();
        assert_eq!((sc.stage_type, sc.mode, sc.batch_size, sc.worker_driven), (StageType::L, Mode::Batch, 7, true));
        assert_eq!(sc.markers.eom, b'|');
        assert_eq!((sc.stage.as_str(), sc.instance, sc.instances), ("load", 1, 2));
        let err = Scenario::from_vars([("ETLSTAGE_EOP", "zz")]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("ETLSTAGE_EOP=\"zz\""), "{err}");
        let err = Scenario::from_vars([("ETLSTAGE_EOP", "0a")]).unwrap_err();
        assert!(err.to_string().contains("must differ"), "{err}");
        let err = Scenario::from_vars([("ETLSTAGE_TYPE", "E"), ("ETLSTAGE_MODE", "batch")]).unwrap_err();
        assert!(err.to_string().contains("ETLSTAGE_MODE"), "{err}");
    }
}
