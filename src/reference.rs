//! The flag reference of a command line, rendered from its clap definition as markdown: one
//! table per command and subcommand, a row per flag with its environment variable, its
//! default and its help. `docs/reference.md` holds this text for `tickd` and `tickctl`
//! (`tests/reference.rs` compares the two, so a flag or a default cannot change without
//! the page); `tickctl man --markdown` prints tickctl's.

use std::fmt::Write as _;

/// The markdown of `command`'s flags and of each visible subcommand's, depth first.
/// Hidden flags (test hooks) and clap's own `--help` and `--version` are left out.
pub fn flag_tables(command: &clap::Command) -> String {
    let mut text = String::new();
    write_command(&mut text, command, command.get_name());
    text
}

fn write_command(text: &mut String, command: &clap::Command, path: &str) {
    let arguments: Vec<&clap::Arg> = command
        .get_arguments()
        .filter(|argument| !argument.is_hide_set())
        .filter(|argument| !matches!(argument.get_id().as_str(), "help" | "version"))
        .collect();
    let _ = writeln!(text, "### `{path}`\n");
    if let Some(about) = command.get_about() {
        let _ = writeln!(text, "{}\n", one_line(&about.to_string()));
    }
    if arguments.is_empty() {
        let _ = writeln!(text, "No flags of its own.\n");
    } else {
        let _ = writeln!(text, "| flag | environment | default | meaning |");
        let _ = writeln!(text, "|---|---|---|---|");
        for argument in arguments {
            let _ = writeln!(
                text,
                "| {} | {} | {} | {} |",
                flag_name(argument),
                argument.get_env().map_or("—".to_owned(), |env| format!(
                    "`{}`",
                    env.to_string_lossy()
                )),
                default(argument),
                meaning(argument),
            );
        }
        text.push('\n');
    }
    for subcommand in command.get_subcommands() {
        if subcommand.is_hide_set() || subcommand.get_name() == "help" {
            continue;
        }
        write_command(
            text,
            subcommand,
            &format!("{path} {}", subcommand.get_name()),
        );
    }
}

fn flag_name(argument: &clap::Arg) -> String {
    let value = argument
        .get_value_names()
        .and_then(|names| names.first())
        .map_or_else(
            || argument.get_id().as_str().to_uppercase(),
            |name| name.to_string(),
        );
    let takes_value = argument
        .get_num_args()
        .is_none_or(|range| range.takes_values())
        && !matches!(
            argument.get_action(),
            clap::ArgAction::SetTrue | clap::ArgAction::SetFalse | clap::ArgAction::Count
        );
    let mut names = Vec::new();
    if let Some(short) = argument.get_short() {
        names.push(format!("-{short}"));
    }
    if let Some(long) = argument.get_long() {
        names.push(format!("--{long}"));
    }
    if names.is_empty() {
        return format!("`{value}`");
    }
    let names = names.join(", ");
    if takes_value {
        format!("`{names} {value}`")
    } else {
        format!("`{names}`")
    }
}

fn default(argument: &clap::Arg) -> String {
    let values: Vec<String> = argument
        .get_default_values()
        .iter()
        .map(|value| value.to_string_lossy().into_owned())
        .collect();
    match values.as_slice() {
        [] => "—".to_owned(),
        [value] if value.is_empty() => "`\"\"`".to_owned(),
        _ => format!("`{}`", values.join(",")),
    }
}

fn meaning(argument: &clap::Arg) -> String {
    let mut meaning = argument
        .get_help()
        .map(|help| one_line(&help.to_string()))
        .unwrap_or_default();
    let choices: Vec<String> = argument
        .get_possible_values()
        .iter()
        .filter(|value| !value.is_hide_set())
        .map(|value| format!("`{}`", value.get_name()))
        .collect();
    let is_switch = matches!(
        argument.get_action(),
        clap::ArgAction::SetTrue | clap::ArgAction::SetFalse
    );
    if !choices.is_empty() && !is_switch {
        if !meaning.is_empty() {
            meaning.push(' ');
        }
        let _ = write!(meaning, "One of {}.", choices.join(", "));
    }
    if argument.is_required_set() {
        meaning.push_str(" Required.");
    }
    meaning.trim().to_owned()
}

/// Help text on one table row: whitespace collapsed, `|` escaped.
fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}
