//! What the target's pod template tells the objective about the engine (docs/objective.md#calibration):
//! vLLM's `--max-num-seqs`, the most sequences one replica runs in a batch. The operator reads it
//! from the template's container command and arguments, where a Deployment states it; nothing in
//! vLLM's metrics gives it (`vllm:cache_config_info` describes the KV cache only).
//!
//! Source: vLLM's engine arguments (`--max-num-seqs N`, also spelled `--max-num-seqs=N` and,
//! since its parser accepts underscores, `--max_num_seqs`).

use serde_json::Value;

/// vLLM's flag for the batch limit, in its two spellings.
const FLAGS: [&str; 2] = ["--max-num-seqs", "--max_num_seqs"];

/// The `--max-num-seqs` of a pod template (`spec.template` of a Deployment: `{metadata, spec:
/// {containers: [{command, args}]}}`), sequences per replica; `None` when no container states
/// it, or states it with a value that is not a whole number of at least 1 (an unexpanded
/// `$(VAR)`, say): then the batch limit is learned from the metrics.
///
/// The command and the arguments are read as one list of words, each split at white space, so a
/// flag inside a shell line (`sh -c "vllm serve m --max-num-seqs 32"`) counts too. The first
/// container that states the flag is the engine's; the last occurrence in it wins, as in
/// vLLM's argument parser.
pub fn max_num_seqs(template: &Value) -> Option<u32> {
    let containers = template.get("spec")?.get("containers")?.as_array()?;
    containers.iter().find_map(|container| {
        let words: Vec<&str> = ["command", "args"]
            .iter()
            .filter_map(|key| container.get(*key).and_then(Value::as_array))
            .flatten()
            .filter_map(Value::as_str)
            .flat_map(str::split_whitespace)
            .collect();
        let mut found = None;
        for (i, word) in words.iter().enumerate() {
            let value = FLAGS.iter().find_map(|flag| {
                let rest = word.strip_prefix(flag)?;
                if rest.is_empty() {
                    Some(words.get(i + 1).copied().unwrap_or_default())
                } else {
                    rest.strip_prefix('=')
                }
            });
            if let Some(value) = value {
                found = Some(value.trim_matches(['"', '\'']).parse::<u32>().ok());
            }
        }
        found.map(|n| n.filter(|n| *n >= 1))
    })?
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
        ] {
            let t = template(json!([{"name": "vllm", "args": args}]));
            assert_eq!(max_num_seqs(&t), Some(32), "{args}");
        }
    }

    #[test]
    fn reads_a_shell_line_and_the_command() {
        let t = template(json!([{
            "name": "vllm",
            "command": ["sh", "-c", "exec vllm serve m --max-num-seqs 48 --port 8000"],
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
            json!(["--max-num-seqs", "$(SEQS)"]),
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
