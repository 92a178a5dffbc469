//! Stage 9's cap on what the model reads: a result whose text (text blocks, and JSON blocks
//! as the compact text the model is sent) is over the cap keeps a head and a tail of each
//! large block around a marker that says how much was left out and under which digest the
//! whole block is kept beside the log. One cut, before the record is made, so the model, the
//! log line and the UI see the same content (invariant 10).

use toolrail_session_log::{
    ContentBlock,
    elided::{ElidedBlock, model_text_len},
};

/// The default cap on a result's model-facing text: 64 KiB.
pub const DEFAULT_CONTENT_TEXT_CAP: usize = 64 * 1024;

/// Cuts `content` so its text fits in `cap` bytes; returns the whole blocks that were cut.
///
/// The cap is shared so that small blocks stay whole: blocks are served from the smallest up,
/// each taking at most an even share of what is left, and only blocks larger than their
/// share are cut (to their share, marker included). Images do not count and are never cut.
/// A share smaller than the marker (a cap of a few hundred bytes over many blocks) keeps the
/// marker alone, which may then exceed the share.
pub(super) fn cap_content(content: &mut [ContentBlock], cap: usize) -> Vec<ElidedBlock> {
    let sized = || {
        content
            .iter()
            .enumerate()
            .filter(|(_, block)| !matches!(block, ContentBlock::Image { .. }))
            .map(|(index, block)| (index, model_text_len(block)))
    };
    // Almost every result fits: that is found without allocating.
    if sized().map(|(_, size)| size).sum::<usize>() <= cap {
        return Vec::new();
    }
    let mut sizes: Vec<(usize, usize)> = sized().collect();
    sizes.sort_by_key(|&(index, size)| (size, index));
    let mut budget = cap;
    let mut cuts = Vec::new();
    for (served, &(index, size)) in sizes.iter().enumerate() {
        let share = budget / (sizes.len() - served);
        let allotted = size.min(share);
        budget -= allotted;
        if size > allotted {
            cuts.push((index, allotted));
        }
    }
    cuts.sort_unstable();
    let mut elided = Vec::with_capacity(cuts.len());
    for (index, allotted) in cuts {
        let Some(slot) = content.get_mut(index) else {
            continue;
        };
        let whole = std::mem::replace(slot, ContentBlock::text(String::new()));
        let record = ElidedBlock::new(index, whole);
        let cut = match &record.whole {
            Some(ContentBlock::Text { text }) => cut_text(text, allotted, Some(&record.digest)),
            Some(ContentBlock::Json { value }) => {
                cut_text(&value.to_string(), allotted, Some(&record.digest))
            }
            // Not cut (not counted above); nothing else can be here.
            Some(ContentBlock::Image { .. }) | None => continue,
        };
        *slot = ContentBlock::text(cut);
        elided.push(record);
    }
    elided
}

/// `text` in at most `limit` bytes (the marker included): a head and a tail, each ending on
/// a line break when one is near, around a marker naming `digest` (where the whole is kept,
/// if it is).
pub(super) fn cut_text(text: &str, limit: usize, digest: Option<&str>) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    // The marker's length with the most digits it can need, so the cut never overshoots.
    let room = limit.saturating_sub(marker(text.len(), text.len(), digest).len());
    let head_end = snap_back_to_line(text, text.floor_char_boundary(room / 2));
    let tail_room = room - head_end;
    let tail_start = snap_forward_to_line(
        text,
        text.ceil_char_boundary(text.len() - tail_room),
        text.len(),
    );
    let left_out = tail_start - head_end;
    let mut cut = String::with_capacity(room + 200);
    cut.push_str(&text[..head_end]);
    cut.push_str(&marker(left_out, text.len(), digest));
    cut.push_str(&text[tail_start..]);
    cut
}

fn marker(left_out: usize, whole: usize, digest: Option<&str>) -> String {
    match digest {
        Some(digest) => format!(
            "\n[… {left_out} of {whole} bytes left out here; the whole text is kept beside the session log as {digest} …]\n"
        ),
        None => format!("\n[… {left_out} of {whole} bytes left out here …]\n"),
    }
}

/// Moves a head's end back to just after a line break in its last quarter, if there is one.
fn snap_back_to_line(text: &str, end: usize) -> usize {
    let from = text.floor_char_boundary(end - end / 4);
    text[from..end].rfind('\n').map_or(end, |at| from + at + 1)
}

/// Moves a tail's start forward to just after a line break in its first quarter, if any.
fn snap_forward_to_line(text: &str, start: usize, len: usize) -> usize {
    let to = text.ceil_char_boundary(start + (len - start) / 4);
    text[start..to]
        .find('\n')
        .map_or(start, |at| start + at + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: Option<&str> = Some("sha256:0000");

    #[test]
    fn a_cut_keeps_head_and_tail_within_the_limit_on_char_boundaries() {
        // Four-byte characters: a cut anywhere but a boundary would split one.
        let text = "😀".repeat(10_000);
        for limit in [200, 201, 202, 203, 1_000, 4_097] {
            let cut = cut_text(&text, limit, DIGEST);
            assert!(cut.len() <= limit, "{limit}: {}", cut.len());
            assert!(cut.starts_with('😀') || limit < 250, "{limit}");
            assert!(cut.ends_with('😀') || limit < 250, "{limit}");
        }
        let cut = cut_text(&text, 1_000, DIGEST);
        let (head, rest) = cut.split_once('\n').unwrap();
        let (note, tail) = rest.split_once('\n').unwrap();
        let left_out = text.len() - head.len() - tail.len();
        assert_eq!(
            note,
            format!(
                "[… {left_out} of 40000 bytes left out here; the whole text is kept beside the session log as sha256:0000 …]"
            )
        );
    }

    #[test]
    fn a_cut_ends_on_a_line_break_when_one_is_near() {
        let text: String = (0..2_000).map(|n| format!("line {n:04}\n")).collect();
        let cut = cut_text(&text, 2_000, DIGEST);
        assert!(cut.len() <= 2_000);
        let (head, rest) = cut.split_once("\n[…").unwrap();
        let tail = rest.split_once("…]\n").unwrap().1;
        // Whole lines of ten bytes on both sides.
        assert!(head.ends_with('\n') && head.len() % 10 == 0, "{head}");
        assert!(tail.starts_with("line ") && tail.len() % 10 == 0, "{tail}");
        assert!(text.starts_with(head) && text.ends_with(tail));
    }

    #[test]
    fn small_blocks_stay_whole_and_large_ones_share_the_rest() {
        let mut content = vec![
            ContentBlock::text("a".repeat(100)),
            ContentBlock::text("b".repeat(10_000)),
            ContentBlock::Image {
                media_type: "image/png".into(),
                data: "c".repeat(50_000),
            },
            ContentBlock::text("d".repeat(20_000)),
        ];
        let before = content.clone();
        let elided = cap_content(&mut content, 4_100);
        assert_eq!(content[0], before[0]);
        assert_eq!(content[2], before[2]);
        let indexes: Vec<usize> = elided.iter().map(|elided| elided.index).collect();
        assert_eq!(indexes, [1, 3]);
        assert_eq!(elided[0].whole.as_ref(), Some(&before[1]));
        assert_eq!(elided[1].whole.as_ref(), Some(&before[3]));
        let text: usize = [0, 1, 3].iter().map(|&i| model_text_len(&content[i])).sum();
        assert!(text <= 4_100, "{text}");
        // The two large blocks share what the small one left: 2000 bytes each at most (the
        // marker's count may have a digit fewer than the room kept for it).
        assert!((1_990..=2_000).contains(&model_text_len(&content[1])));
        assert!((1_990..=2_000).contains(&model_text_len(&content[3])));
    }

    #[test]
    fn content_within_the_cap_is_left_alone() {
        let mut content = vec![ContentBlock::text("x".repeat(100))];
        assert!(cap_content(&mut content, 100).is_empty());
        assert_eq!(content, vec![ContentBlock::text("x".repeat(100))]);
    }
}
