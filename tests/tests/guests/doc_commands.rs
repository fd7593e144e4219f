//! The commands a page of the documentation tells a user to type, read from the page
//! itself, so that the page and the test that runs them cannot drift. A page's block is
//! the first fenced block after a heading: in a ```sh block every line is a command; in
//! a ```text transcript every `$ ` line is one, and the lines after it are the output it
//! shows. A trailing `# comment` is not part of a command. A shown line ending in `...`
//! stands for any line that begins with the rest; a line `...` alone for lines left out.

/// One command of a page's block.
pub struct DocCommand {
    /// Its words, split on whitespace (the blocks quote nothing).
    pub words: Vec<String>,
    /// The output lines the page shows after it (a transcript's).
    pub shown: Vec<String>,
}

impl DocCommand {
    /// `weir SUBCOMMAND ...`.
    pub fn is_weir(&self, subcommand: &str) -> bool {
        self.words.len() >= 2 && self.words[0] == "weir" && self.words[1] == subcommand
    }
}

/// The info string and the text of the first fenced block after the line `heading` of
/// `page` (a path from the repository root).
pub fn block_after(page: &str, heading: &str) -> (String, String) {
    let path = weir_tests::repo_root().join(page);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{page}: {e}"));
    let mut lines = text
        .lines()
        .skip_while(|l| *l != heading)
        .skip_while(|l| !l.starts_with("```"));
    let info = lines
        .next()
        .unwrap_or_else(|| panic!("{page}: no block after {heading:?}"))
        .trim_start_matches('`')
        .to_owned();
    let mut block = String::new();
    for line in lines.take_while(|l| !l.starts_with("```")) {
        block.push_str(line);
        block.push('\n');
    }
    (info, block)
}

/// The commands of a block whose info string is `info` (`sh` or `text`).
pub fn commands(info: &str, block: &str) -> Vec<DocCommand> {
    let mut commands: Vec<DocCommand> = Vec::new();
    for line in block.lines() {
        let command = match info {
            "sh" => Some(line),
            "text" => line.strip_prefix("$ "),
            _ => panic!("a block of commands is sh or text, not {info:?}"),
        };
        match command {
            Some(command) => {
                let command = command.split(" #").next().unwrap_or_default();
                assert!(
                    !command.contains(['"', '\'', '\\']),
                    "a command to split on whitespace: {command}"
                );
                let words: Vec<String> = command.split_whitespace().map(str::to_owned).collect();
                if !words.is_empty() {
                    commands.push(DocCommand {
                        words,
                        shown: Vec::new(),
                    });
                }
            }
            None => commands
                .last_mut()
                .unwrap_or_else(|| panic!("output before any command: {line}"))
                .shown
                .push(line.to_owned()),
        }
    }
    commands
}

/// Asserts that `output` holds the lines `command`'s page shows, in order: consecutive
/// shown lines on consecutive output lines, except across a `...` line, which skips
/// any; the first shown line anywhere.
pub fn assert_shown(command: &DocCommand, output: &str) {
    let lines: Vec<&str> = output.lines().collect();
    let (mut at, mut gap) = (0, true);
    for want in &command.shown {
        if want == "..." {
            gap = true;
            continue;
        }
        let matches = |line: &str| match want.strip_suffix("...") {
            Some(start) => line.starts_with(start),
            None => line == want,
        };
        let reach = if gap { lines.len() } else { at + 1 };
        let Some(found) = (at..reach.min(lines.len())).find(|&i| matches(lines[i])) else {
            panic!(
                "`{}` printed no line {want:?} where its page shows one:\n{output}",
                command.words.join(" ")
            );
        };
        (at, gap) = (found + 1, false);
    }
}
