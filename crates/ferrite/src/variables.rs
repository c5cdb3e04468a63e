//! Resource variables of a session (VAR_HANDLE / READ_VARIABLE / ASSIGN_VARIABLE):
//! the state of streaming models, kept across runs until reset. Owned by the
//! session's backend context; the executor reads and writes it.

use crate::error::{Error, Result};

/// Resource variables of a session (VAR_HANDLE / READ_VARIABLE / ASSIGN_VARIABLE),
/// persisting across runs until reset.
#[derive(Debug, Default)]
pub struct Variables {
    names: Vec<String>,
    values: Vec<Option<Vec<u8>>>,
    /// Bumped by `reset`, so CALL_ONCE initializers run again.
    generation: u64,
}

impl Variables {
    /// The id of the variable called `name`, created on first use.
    pub fn id(&mut self, name: &str) -> usize {
        match self.names.iter().position(|n| n == name) {
            Some(i) => i,
            None => {
                self.names.push(name.to_string());
                self.values.push(None);
                self.names.len() - 1
            }
        }
    }

    /// Bumped by every reset: CALL_ONCE initializers run once per generation.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Forgets every value; initializers (CALL_ONCE) run again on the next run.
    pub fn reset(&mut self) {
        for v in &mut self.values {
            *v = None;
        }
        self.generation += 1;
    }

    pub(crate) fn get(&self, id: usize) -> Result<&[u8]> {
        self.values.get(id).and_then(|v| v.as_deref()).ok_or_else(|| Error::Runtime(format!("variable {id} is read before it is assigned").into()))
    }

    pub(crate) fn set(&mut self, id: usize, value: &[u8]) -> Result<()> {
        let slot = self.values.get_mut(id).ok_or_else(|| Error::Runtime(format!("variable {id} does not exist").into()))?;
        match slot {
            // Same size: overwrite in place, so steady-state assigns do not allocate.
            Some(v) if v.len() == value.len() => v.copy_from_slice(value),
            _ => *slot = Some(value.to_vec()),
        }
        Ok(())
    }
}

impl Variables {
    /// Variable `id`'s value as `len` writable bytes, for a kernel that computes
    /// the assigned value in place (an ASSIGN_VARIABLE fused with its value's
    /// producer). A variable unassigned so far, or holding another size, gets a
    /// zeroed value of `len` bytes first (that assignment allocates, later ones of
    /// the same size do not). A kernel that fails leaves the value partly written,
    /// where an assignment of a copy would have left the old one: the run that
    /// failed reports it.
    pub(crate) fn assign_in_place(&mut self, id: usize, len: usize) -> Result<&mut [u8]> {
        let slot = self.values.get_mut(id).ok_or_else(|| Error::Runtime(format!("variable {id} does not exist").into()))?;
        if slot.as_ref().is_none_or(|v| v.len() != len) {
            *slot = Some(vec![0; len]);
        }
        Ok(slot.as_deref_mut().unwrap_or_default())
    }
}

pub(crate) fn resource_id(b: &[u8]) -> Result<usize> {
    let v = b.get(..4).map(|x| i32::from_le_bytes([x[0], x[1], x[2], x[3]])).ok_or_else(|| Error::Runtime("resource handle is empty".into()))?;
    usize::try_from(v).map_err(|_| Error::Runtime(format!("invalid resource handle {v}").into()))
}
