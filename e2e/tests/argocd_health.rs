//! The Argo CD health check for LLMScaler (`docs/argocd/llmscaler/health.lua`) run the way Argo
//! CD's own `resource_customizations` tests run theirs: every case of `health_test.yaml` loads
//! its input object as the global `obj`, runs the script, and compares `status` and `message`.
//! Argo CD embeds gopher-lua, a Lua 5.1; the script runs here on the reference Lua 5.1
//! interpreter (`lua5.1`, installed by `e2e/install-deps`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_yaml::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/argocd/llmscaler")
}

fn lua_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `value` as a Lua table constructor, as Argo CD hands a resource to a script (maps become
/// tables keyed by string, lists tables indexed from 1).
fn lua(value: &Value) -> String {
    match value {
        Value::Null => "nil".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => lua_string(s),
        Value::Sequence(items) => {
            let items: Vec<String> = items.iter().map(lua).collect();
            format!("{{{}}}", items.join(", "))
        }
        Value::Mapping(map) => {
            let fields: Vec<String> = map
                .iter()
                .map(|(k, v)| {
                    let key = k.as_str().map_or_else(|| format!("{k:?}"), str::to_owned);
                    format!("[{}] = {}", lua_string(&key), lua(v))
                })
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
        Value::Tagged(tagged) => lua(&tagged.value),
    }
}

/// Runs the script on `object`; returns `(status, message)`.
fn health(script: &str, object: &Value) -> anyhow::Result<(String, String)> {
    let program = format!(
        "obj = {}\nlocal function health()\n{script}\nend\nlocal hs = health()\n\
         io.write(tostring(hs.status), \"\\n\", tostring(hs.message or \"\"), \"\\n\")\n",
        lua(object)
    );
    let mut child = Command::new("lua5.1")
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| anyhow::anyhow!("starting lua5.1 (e2e/install-deps installs it): {e}"))?;
    child
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdin"))?
        .write_all(program.as_bytes())?;
    let out = child.wait_with_output()?;
    anyhow::ensure!(
        out.status.success(),
        "lua5.1 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout)?;
    let mut lines = text.splitn(2, '\n');
    let status = lines.next().unwrap_or_default().to_owned();
    let message = lines
        .next()
        .unwrap_or_default()
        .trim_end_matches('\n')
        .to_owned();
    Ok((status, message))
}

#[test]
#[ignore = "needs lua5.1 from e2e/install-deps"]
fn the_llmscaler_health_check_passes_its_argo_cd_test_cases() -> anyhow::Result<()> {
    let script = std::fs::read_to_string(dir().join("health.lua"))?;
    let tests: Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir().join("health_test.yaml"))?)?;
    let cases = tests["tests"]
        .as_sequence()
        .ok_or_else(|| anyhow::anyhow!("health_test.yaml: no tests"))?;
    let mut statuses = std::collections::BTreeSet::new();
    for case in cases {
        let input = case["inputPath"].as_str().unwrap_or_default();
        let object: Value = serde_yaml::from_str(&std::fs::read_to_string(dir().join(input))?)?;
        let (status, message) = health(&script, &object)?;
        println!("{input}: {status}: {message}");
        assert_eq!(
            status,
            case["healthStatus"]["status"].as_str().unwrap_or_default(),
            "{input}"
        );
        assert_eq!(
            message,
            case["healthStatus"]["message"].as_str().unwrap_or_default(),
            "{input}"
        );
        statuses.insert(status);
    }
    // Every status Argo CD distinguishes for it is covered.
    assert_eq!(
        statuses.into_iter().collect::<Vec<_>>(),
        ["Degraded", "Healthy", "Progressing", "Suspended"]
    );
    Ok(())
}
