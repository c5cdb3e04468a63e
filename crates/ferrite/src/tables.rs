//! Hash tables of a session (HASHTABLE / HASHTABLE_IMPORT / HASHTABLE_FIND /
//! HASHTABLE_SIZE): resources like the variables of `variables.rs`, kept from run
//! to run for the session's life. A table is named by its `table_id`: ops with
//! the same id in one session share it, and a new session starts with none.
//! Keys and values are stored as bytes: a string's own, an int64's 8
//! little-endian bytes.
//!
//! As LiteRT's static hash table: the first import fills the table and later
//! imports change nothing; among duplicate keys of that import, the first wins.

use std::collections::HashMap;

use crate::model::DType;

/// One table: its key and value types and its entries.
#[derive(Debug)]
pub(crate) struct Table {
    pub(crate) key: DType,
    pub(crate) value: DType,
    entries: HashMap<Vec<u8>, Vec<u8>>,
    imported: bool,
}

impl Table {
    /// Fills an empty table from `keys` and `values` (same length); a second
    /// import is ignored, and a duplicate key keeps its first value.
    pub(crate) fn import(&mut self, keys: Vec<&[u8]>, values: Vec<&[u8]>) {
        if self.imported {
            return;
        }
        self.imported = true;
        for (k, v) in keys.into_iter().zip(values) {
            self.entries.entry(k.to_vec()).or_insert_with(|| v.to_vec());
        }
    }

    /// The value of `key`, if present.
    pub(crate) fn find(&self, key: &[u8]) -> Option<&[u8]> {
        self.entries.get(key).map(Vec::as_slice)
    }

    /// How many entries it holds.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The tables of a session, by table id.
#[derive(Debug, Default)]
pub(crate) struct Tables {
    by_id: HashMap<i32, Table>,
}

impl Tables {
    /// Declares table `id` of the given types (created empty on first use).
    /// False when the id names a table of other types.
    pub(crate) fn declare(&mut self, id: i32, key: DType, value: DType) -> bool {
        let t = self.by_id.entry(id).or_insert_with(|| Table { key, value, entries: HashMap::new(), imported: false });
        t.key == key && t.value == value
    }

    /// Table `id`, if declared.
    pub(crate) fn get_mut(&mut self, id: i32) -> Option<&mut Table> {
        self.by_id.get_mut(&id)
    }
}
