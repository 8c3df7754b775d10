//! Stop strings (OpenAI's `stop`): generated text is cut before the first occurrence of any
//! of them and generation ends there. While text streams, the tail that could still grow
//! into a stop string is held back, so a client never sees part of one.

/// Streams text pieces through a set of stop strings.
#[derive(Debug, Clone, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    /// Text received but not yet released (a possible start of a stop string).
    held: String,
    /// All text released so far.
    released: String,
    stopped: bool,
}

impl StopStrings {
    /// Empty strings are ignored (they would match everywhere).
    pub fn new(stops: &[String]) -> StopStrings {
        StopStrings {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            ..StopStrings::default()
        }
    }

    /// Adds `piece`; returns the text that may be shown now. After a stop string was seen
    /// ([`StopStrings::stopped`]) nothing more is released.
    pub fn push(&mut self, piece: &str) -> String {
        if self.stopped {
            return String::new();
        }
        self.held.push_str(piece);
        if let Some(at) = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            self.stopped = true;
            let out = self.held[..at].to_string();
            self.held.clear();
            self.released.push_str(&out);
            return out;
        }
        // Hold back the longest tail that is a proper prefix of some stop string.
        let keep = self
            .stops
            .iter()
            .map(|s| longest_suffix_prefix(&self.held, s))
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let out: String = self.held.drain(..cut).collect();
        self.released.push_str(&out);
        out
    }

    /// The generation ended without a stop string: the held text is released.
    pub fn finish(&mut self) -> String {
        let out = std::mem::take(&mut self.held);
        self.released.push_str(&out);
        out
    }

    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Every piece released so far, joined.
    pub fn text(&self) -> &str {
        &self.released
    }
}

/// Length of the longest suffix of `text` (at a char boundary) that is a proper prefix of
/// `stop`.
fn longest_suffix_prefix(text: &str, stop: &str) -> usize {
    let max = text.len().min(stop.len().saturating_sub(1));
    (1..=max)
        .rev()
        .find(|&n| {
            let start = text.len() - n;
            text.is_char_boundary(start) && stop.as_bytes().starts_with(&text.as_bytes()[start..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (Vec<String>, String, bool) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut s = StopStrings::new(&stops);
        let mut out: Vec<String> = pieces.iter().map(|p| s.push(p)).collect();
        if !s.stopped() {
            out.push(s.finish());
        }
        (out, s.text().to_string(), s.stopped())
    }

    #[test]
    fn cuts_before_the_stop_and_holds_back_partial_matches() {
        let (out, text, stopped) = run(&["END"], &["a", "bE", "N", "Dzz"]);
        assert_eq!(out, vec!["a", "b", "", ""]);
        assert_eq!((text.as_str(), stopped), ("ab", true));
        // A partial match that does not complete is released.
        let (out, text, stopped) = run(&["END"], &["xE", "Ny"]);
        assert_eq!(out, vec!["x", "ENy", ""]);
        assert_eq!((text.as_str(), stopped), ("xENy", false));
        // The earliest of several stops wins; multi-byte text is cut on char boundaries.
        let (_, text, _) = run(&["é!", "zz"], &["aé", "zzé!"]);
        assert_eq!(text, "aé");
        let (out, text, stopped) = run(&[], &["a", "b"]);
        assert_eq!(
            (out.concat(), text.as_str(), stopped),
            ("ab".into(), "ab", false)
        );
        let (_, text, _) = run(&["", "b"], &["ab"]);
        assert_eq!(text, "a");
    }
}
