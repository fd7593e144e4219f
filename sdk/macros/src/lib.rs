//! The attribute macros of `weir-guest`: `#[map]` and `#[aggregate(emit = ...)]`.
//!
//! Each leaves the user's function as written and adds, in an anonymous `const` block,
//! a unit struct implementing the generated `Guest` trait of its world by calling the
//! SDK's batch loop with that function, then the SDK's export macro for it. The
//! expansion names the SDK as `::weir_guest`, so guests depend on it under that name.
//! Documentation lives on the re-exports in `weir-guest`.

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, Path, Type, parse_macro_input};

/// See `weir_guest::map`.
#[proc_macro_attribute]
pub fn map(args: TokenStream, item: TokenStream) -> TokenStream {
    let function = parse_macro_input!(item as ItemFn);
    let args = proc_macro2::TokenStream::from(args);
    if !args.is_empty() {
        return syn::Error::new(args.span(), "`#[weir_guest::map]` takes no arguments")
            .to_compile_error()
            .into();
    }
    // The argument types pick the form (owned, borrowed, emitting): the SDK's
    // `MapFunction` trait tells them apart, here only the arity is checked.
    let arity = if function.sig.inputs.len() == 2 { 2 } else { 1 };
    match check_signature(
        &function,
        arity,
        "fn(Record | RecordRef<'_>) -> Result<Record | Option<Record> | Vec<Record>>, \
         or fn(RecordRef<'_>, &mut Emitter<'_>) -> Result<()>",
    ) {
        Ok(()) => expand_map(&function).into(),
        Err(error) => error.to_compile_error().into(),
    }
}

/// See `weir_guest::aggregate`.
#[proc_macro_attribute]
pub fn aggregate(args: TokenStream, item: TokenStream) -> TokenStream {
    let function = parse_macro_input!(item as ItemFn);
    let mut emit: Option<Path> = None;
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("emit") {
            emit = Some(meta.value()?.parse()?);
            Ok(())
        } else {
            Err(meta.error("unknown argument; expected `emit = <function>`"))
        }
    });
    parse_macro_input!(args with parser);
    let Some(emit) = emit else {
        return syn::Error::new(
            Span::call_site(),
            "missing `emit`: write `#[weir_guest::aggregate(emit = my_emit)]` with \
             `fn my_emit(key: &[u8], window: Option<Window>, acc: &Acc) -> Record` \
             (or `Option<Record>` / `Vec<Record>`), or \
             `fn my_emit(key: &[u8], window: Option<Window>, acc: &Acc, out: &mut Emitter<'_>)`",
        )
        .to_compile_error()
        .into();
    };
    let expanded = check_signature(
        &function,
        2,
        "fn(&mut Acc, &Record | RecordRef<'_>) [-> Result<()>]",
    )
    .and_then(|()| accumulator_type(&function))
    .map(|accumulator| expand_aggregate(&function, accumulator, &emit));
    match expanded {
        Ok(tokens) => tokens.into(),
        Err(error) => error.to_compile_error().into(),
    }
}

fn expand_map(function: &ItemFn) -> proc_macro2::TokenStream {
    let name = &function.sig.ident;
    let call = quote_spanned! {name.span()=> ::weir_guest::__private::map(batch, #name) };
    quote! {
        #function

        const _: () = {
            struct WeirMapper;

            impl ::weir_guest::__private::MapGuest for WeirMapper {
                fn map(
                    batch: ::weir_guest::__private::WitRecordBatch,
                ) -> ::weir_guest::__private::WitMapOutput {
                    #call
                }
            }

            ::weir_guest::__private::mapper::export_mapper!(WeirMapper);
        };
    }
}

fn expand_aggregate(
    function: &ItemFn,
    accumulator: &Type,
    emit: &Path,
) -> proc_macro2::TokenStream {
    let name = &function.sig.ident;
    // The accumulator type is named explicitly in both calls, so an `emit` function
    // over another type is a compile error, not corrupt state.
    let update = quote_spanned! {name.span()=>
        ::weir_guest::__private::update::<#accumulator, _, _>(groups, #name)
    };
    let update_and_emit = quote_spanned! {name.span()=>
        ::weir_guest::__private::update_and_emit::<#accumulator, _, _, _, _>(groups, #name, #emit)
    };
    let emit = quote_spanned! {emit.span()=>
        ::weir_guest::__private::emit::<#accumulator, _, _>(entries, #emit)
    };
    quote! {
        #function

        const _: () = {
            struct WeirAggregator;

            impl ::weir_guest::__private::AggregateGuest for WeirAggregator {
                fn update(
                    groups: ::weir_guest::__private::WitGroupBatch,
                ) -> ::weir_guest::__private::WitUpdateOutput {
                    #update
                }

                fn emit(
                    entries: ::weir_guest::__private::WitEmitBatch,
                ) -> ::weir_guest::__private::WitRecordBatch {
                    #emit
                }
            }

            impl ::weir_guest::__private::UpdateAndEmitGuest for WeirAggregator {
                fn update_and_emit(
                    groups: ::weir_guest::__private::WitGroupBatch,
                ) -> ::weir_guest::__private::WitUpdateAndEmitOutput {
                    #update_and_emit
                }
            }

            ::weir_guest::__private::aggregator::export_aggregator!(WeirAggregator);
        };
    }
}

/// Rejects what the SDK cannot call: methods, generics, async, wrong arity.
fn check_signature(function: &ItemFn, arity: usize, expected: &str) -> syn::Result<()> {
    let sig = &function.sig;
    let problem = if sig.asyncness.is_some() {
        Some("must not be `async`")
    } else if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        Some("must not be generic")
    } else if sig
        .inputs
        .iter()
        .any(|arg| matches!(arg, FnArg::Receiver(_)))
    {
        Some("must be a free function, not a method")
    } else if sig.inputs.len() != arity {
        Some("has the wrong number of arguments")
    } else if sig.variadic.is_some() {
        Some("must not be variadic")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(syn::Error::new(
            sig.span(),
            format!("a weir guest function {problem}; expected `{expected}`"),
        )),
        None => Ok(()),
    }
}

/// `A` in the update function's first argument `acc: &mut A`.
fn accumulator_type(function: &ItemFn) -> syn::Result<&Type> {
    let first = function.sig.inputs.first();
    if let Some(FnArg::Typed(arg)) = first
        && let Type::Reference(reference) = &*arg.ty
        && reference.mutability.is_some()
    {
        return Ok(&reference.elem);
    }
    Err(syn::Error::new(
        first.map_or_else(|| function.sig.span(), Spanned::span),
        "the first argument of an aggregate's update function must be the accumulator, \
         `acc: &mut Acc` with `Acc: Default + Serialize + DeserializeOwned`",
    ))
}
