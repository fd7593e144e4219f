//! Tables told apart by their `type` key (`[[sources]]`, `[[steps]]`, `[[sinks]]`).
//!
//! serde's internally tagged enums buffer the table before choosing the variant, which
//! loses toml's spans: every error inside would point at the table's header. Instead
//! the spec parses the document into toml's spanned tree, reads `type` itself, removes
//! it (and any key common to every variant) and deserializes the chosen variant's
//! config straight from the spanned table, so an unknown or bad key is reported at its
//! own line.

use std::ops::Range;

use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::{DeValue, ValueDeserializer};

use crate::field::InvalidField;
use crate::spec::did_you_mean::closest;
use crate::spec::error::Located;

pub(crate) type Item<'i> = Spanned<DeValue<'i>>;

/// The entries of the array of tables `key` (`[[key]]`), or none if it is absent.
pub(crate) fn array_of_tables<'i>(
    key: &str,
    value: Option<Item<'i>>,
) -> Result<Vec<Item<'i>>, Located> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let span = value.span();
    match value.into_inner() {
        DeValue::Array(items) => {
            let items: Vec<Item<'i>> = items.into_iter().collect();
            if let Some(bad) = items.iter().find(|i| !i.get_ref().is_table()) {
                return Err(Located::at(
                    bad.span(),
                    format!("each entry of {key} must be a table ([[{key}]])"),
                ));
            }
            Ok(items)
        }
        _ => Err(Located::at(
            span,
            format!("{key} must be an array of tables: write each one as [[{key}]]"),
        )),
    }
}

/// A table with its `type` taken out.
pub(crate) struct Tagged<'i> {
    pub kind: String,
    pub kind_span: Range<usize>,
    pub table: Item<'i>,
}

/// Takes `type` out of `item` (an entry of `[[what]]s`), which must be one of `kinds`
/// or `reserved` (known names whose connector is not there yet: the caller refuses them
/// with a clearer message than "unknown").
pub(crate) fn split_type<'i>(
    mut item: Item<'i>,
    what: &str,
    kinds: &[&str],
    reserved: &[&str],
) -> Result<Tagged<'i>, Located> {
    let header = item.span();
    let expected = || {
        kinds
            .iter()
            .map(|k| format!("\"{k}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(tag) = take(&mut item, "type") else {
        let misspelt = keys(&item)
            .into_iter()
            .find(|key| closest(key, ["type"]).is_some())
            .map(|key| format!(" (`{key}` is not `type`)"))
            .unwrap_or_default();
        return Err(Located::at(
            header,
            format!(
                "{what} has no `type`{misspelt}: expected one of {}",
                expected()
            ),
        ));
    };
    let kind_span = tag.span();
    let Some(kind) = tag.get_ref().as_str().map(str::to_owned) else {
        return Err(Located::at(
            kind_span,
            format!("{what} `type` must be a string: one of {}", expected()),
        ));
    };
    if !kinds.contains(&kind.as_str()) && !reserved.contains(&kind.as_str()) {
        let hint = closest(&kind, kinds.iter().copied())
            .map(|k| format!("; did you mean \"{k}\"?"))
            .unwrap_or_default();
        return Err(Located::at(
            kind_span,
            format!(
                "unknown {what} type \"{kind}\", expected one of {}{hint}",
                expected()
            ),
        ));
    }
    Ok(Tagged {
        kind,
        kind_span,
        table: item,
    })
}

/// The keys of the table `item` (none if it is not a table).
fn keys(item: &Item<'_>) -> Vec<String> {
    match item.get_ref() {
        DeValue::Table(table) => table.keys().map(|k| k.get_ref().to_string()).collect(),
        _ => Vec::new(),
    }
}

/// Removes `key` from the table `item`.
pub(crate) fn take<'i>(item: &mut Item<'i>, key: &str) -> Option<Item<'i>> {
    match item.get_mut() {
        DeValue::Table(table) => table.remove(key),
        _ => None,
    }
}

/// Deserializes `T` from a spanned value; errors keep their place in the document.
pub(crate) fn from_item<T: DeserializeOwned>(item: Item<'_>) -> Result<T, Located> {
    T::deserialize(ValueDeserializer::from(item)).map_err(Located::from)
}

/// Places a cross-field problem of `table` at the line of its key (or of the table).
pub(crate) fn locate(table: &Item<'_>, e: InvalidField) -> Located {
    let span = table
        .get_ref()
        .as_table()
        .and_then(|t| t.get_key_value(e.field))
        .map(|(k, _)| k.span())
        .unwrap_or_else(|| table.span());
    Located::at(span, e.message)
}
