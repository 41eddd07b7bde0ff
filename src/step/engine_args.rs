//! What the target's pod template tells the objective about the engine (docs/objective.md#calibration):
//! vLLM's `--max-num-seqs`, the most sequences one replica runs in a batch. The operator reads it
//! from the template's container command and arguments, where a Deployment states it; nothing in
//! vLLM's metrics gives it (`vllm:cache_config_info` describes the KV cache only).
//!
//! Source: vLLM's engine arguments (`--max-num-seqs N`, also spelled `--max-num-seqs=N` and,
//! since its parser accepts underscores for dashes, `--max_num_seqs`); Kubernetes expands
//! `$(VAR)` in `command` and `args` from the container's `env`.

use std::collections::HashMap;

use serde_json::Value;

/// vLLM's flag for the batch limit, dashes for underscores.
const FLAG: &str = "--max-num-seqs";

/// Characters around a word of a shell line that are not part of it: quotes and separators.
const AROUND: [char; 6] = ['"', '\'', ';', '&', '|', ','];

/// The `--max-num-seqs` of a pod template (`spec.template` of a Deployment: `{metadata, spec:
/// {containers: [{command, args, env}]}}`), sequences per replica; `None` when no container
/// states it, or states it with a value that is not a whole number of at least 1 (a `$(VAR)`
/// whose variable is not a literal `env` value, say): then the batch limit is learned from the
/// metrics.
///
/// The command and the arguments are read as one list of words, each split at white space and
/// stripped of quotes and shell separators, so a flag inside a shell line (`sh -c "vllm serve m
/// --max-num-seqs 32"`) counts too. The first container that states the flag is the engine's;
/// the last occurrence in it wins, as in vLLM's argument parser.
pub fn max_num_seqs(template: &Value) -> Option<u32> {
    let containers = template.get("spec")?.get("containers")?.as_array()?;
    containers.iter().find_map(stated)?
}

/// `Some(value)` when `container` states the flag (`value` `None` when it is not usable).
fn stated(container: &Value) -> Option<Option<u32>> {
    let env: HashMap<&str, &str> = container
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e.get("name")?.as_str()?, e.get("value")?.as_str()?)))
        .collect();
    let words: Vec<&str> = ["command", "args"]
        .iter()
        .filter_map(|key| container.get(*key).and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .flat_map(str::split_whitespace)
        .map(|w| w.trim_matches(AROUND))
        .collect();
    let mut found = None;
    for (i, word) in words.iter().enumerate() {
        let (flag, inline) = match word.split_once('=') {
            Some((flag, value)) => (flag, Some(value)),
            None => (*word, None),
        };
        if flag.replace('_', "-") != FLAG {
            continue;
        }
        let value = inline
            .or_else(|| words.get(i + 1).copied())
            .unwrap_or_default();
        found = Some(number(value, &env));
    }
    found
}

/// A flag's value as a batch limit: a whole number of at least 1, or a `$(VAR)` naming one in
/// `env`.
fn number(value: &str, env: &HashMap<&str, &str>) -> Option<u32> {
    let value = value.trim_matches(AROUND);
    let value = match value.strip_prefix("$(").and_then(|v| v.strip_suffix(')')) {
        Some(name) => env.get(name)?.trim_matches(AROUND),
        None => value,
    };
    value.parse::<u32>().ok().filter(|n| *n >= 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(containers: Value) -> Value {
        json!({"metadata": {"labels": {"app": "m"}}, "spec": {"containers": containers}})
    }

    #[test]
    fn reads_the_flag_in_every_spelling() {
        for args in [
            json!(["--model", "m", "--max-num-seqs", "32"]),
            json!(["--model", "m", "--max-num-seqs=32"]),
            json!(["--max_num_seqs", "32"]),
            json!(["--max-num-seqs", "'32'"]),
            json!(["--max-num_seqs", "32"]),
            json!(["\"--max-num-seqs=32\""]),
            json!(["--max-num-seqs", "$(SEQS)"]),
        ] {
            let env = json!([{"name": "SEQS", "value": "32"}]);
            let t = template(json!([{"name": "vllm", "args": args, "env": env}]));
            assert_eq!(max_num_seqs(&t), Some(32), "{args}");
        }
    }

    #[test]
    fn reads_a_shell_line_and_the_command() {
        let t = template(json!([{
            "name": "vllm",
            "command": ["sh", "-c", "vllm serve m --max-num-seqs 48; echo done"],
        }]));
        assert_eq!(max_num_seqs(&t), Some(48));
        let t = template(json!([{
            "name": "vllm",
            "command": ["vllm", "serve", "m", "--max-num-seqs", "16"],
            "args": ["--port", "8000"],
        }]));
        assert_eq!(max_num_seqs(&t), Some(16));
    }

    #[test]
    fn the_first_container_stating_it_and_its_last_occurrence_win() {
        let t = template(json!([
            {"name": "proxy", "args": ["--listen", ":8080"]},
            {"name": "vllm", "args": ["--max-num-seqs", "8", "--max-num-seqs", "24"]},
            {"name": "other", "args": ["--max-num-seqs", "99"]},
        ]));
        assert_eq!(max_num_seqs(&t), Some(24));
    }

    #[test]
    fn an_unusable_or_missing_value_is_unknown() {
        for args in [
            json!(["--max-num-seqs", "$(UNSET)"]),
            json!(["--max-num-seqs", "0"]),
            json!(["--max-num-seqs"]),
            json!(["--max-num-seqs=-4"]),
            json!(["--max-num-seqs-extra", "4"]),
            json!(["--max-num-batched-tokens", "2048"]),
        ] {
            let t = template(json!([{"name": "vllm", "args": args}]));
            assert_eq!(max_num_seqs(&t), None, "{args}");
        }
        assert_eq!(max_num_seqs(&json!({"spec": {}})), None);
        assert_eq!(max_num_seqs(&json!("0123abcd")), None);
    }
}
