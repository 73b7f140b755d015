//! `#[derive(RecordSize)]`: a plain record type counts `size_of::<Self>()`
//! bytes (`lockgate::RecordSize`'s defaults), with no
//! `impl RecordSize for X {}` to write. Re-exported as
//! `lockgate::RecordSize` (the derive beside the trait, as serde does).

use proc_macro::TokenStream;
use quote::quote;
use syn::{parse_macro_input, DeriveInput};

/// Implements `lockgate::RecordSize` with its defaults (fixed size:
/// `size_of::<Self>()` a record). A type whose records differ in size (a
/// `String`, a `Vec` inside) writes the impl itself, overriding
/// `size_bytes` and setting `FIXED_SIZE = false`.
#[proc_macro_derive(RecordSize)]
pub fn derive_record_size(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    quote! {
        impl #impl_generics ::lockgate::RecordSize for #name #ty_generics #where_clause {}
    }
    .into()
}
