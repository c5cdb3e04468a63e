//! Backward kernels for training, float32: given a forward op's parameters, the
//! forward tensors it needs and the gradient of the loss with respect to its
//! output (`dy`), they write (overwrite, never accumulate) the gradients with
//! respect to its inputs and weights. Threaded on a [`crate::parallel::ThreadPool`]
//! and partitioned by output element, so results are bit-identical for any thread
//! count.

pub mod conv;
mod split;
#[cfg(test)]
mod check;
