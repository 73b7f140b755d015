pub struct Base;
