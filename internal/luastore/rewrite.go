package luastore

import (
	"strconv"

	"github.com/yuin/gopher-lua/ast"
)

// The compiler's part of Lua 5.1's number rules (luanum.go). Three things
// happen inside gopher-lua's virtual machine, out of reach of the
// environment, and differ from Redis's Lua:
//   - a % b on two numbers is fmod-based (Lua 5.1: a - floor(a/b)*b);
//   - a number operand of .. is written in Go's shortest form (Lua 5.1:
//     "%.14g");
//   - a string bound of a numeric for loop is refused (Lua 5.1 converts it);
//
// and one in its compiler: a numeric literal with a leading zero ("010")
// is read as octal. So before compiling, the script's syntax tree is
// rewritten: a % b becomes a call of the environment's mod function, each
// operand of .. that is not a string literal a call of its concat function,
// each bound of a numeric for loop that is not a literal a call of its
// number function, and each literal is written back as the number Lua 5.1
// reads. The three functions come in as locals of the chunk, so a script's
// functions reach them as upvalues, by names no script can write.

const (
	modName = "\x00mod" // luanum.go's modFunc
	catName = "\x00cat" // luanum.go's concatFunc
	numName = "\x00num" // luanum.go's forNumFunc
)

// rewriteChunk rewrites a parsed script (see above) in place and returns
// it with the prologue that makes the functions locals.
func rewriteChunk(chunk []ast.Stmt) []ast.Stmt {
	stmts(chunk)
	prologue := &ast.LocalAssignStmt{
		Names: []string{modName, catName, numName},
		Exprs: []ast.Expr{&ast.IdentExpr{Value: modName}, &ast.IdentExpr{Value: catName}, &ast.IdentExpr{Value: numName}},
	}
	prologue.SetLine(1)
	prologue.SetLastLine(1)
	return append([]ast.Stmt{prologue}, chunk...)
}

func stmts(list []ast.Stmt) {
	for _, s := range list {
		stmt(s)
	}
}

func exprs(list []ast.Expr) {
	for i, e := range list {
		list[i] = expr(e)
	}
}

func stmt(s ast.Stmt) {
	switch s := s.(type) {
	case *ast.AssignStmt:
		exprs(s.Lhs)
		exprs(s.Rhs)
	case *ast.LocalAssignStmt:
		exprs(s.Exprs)
	case *ast.FuncCallStmt:
		s.Expr = expr(s.Expr)
	case *ast.DoBlockStmt:
		stmts(s.Stmts)
	case *ast.WhileStmt:
		s.Condition = expr(s.Condition)
		stmts(s.Stmts)
	case *ast.RepeatStmt:
		s.Condition = expr(s.Condition)
		stmts(s.Stmts)
	case *ast.IfStmt:
		s.Condition = expr(s.Condition)
		stmts(s.Then)
		stmts(s.Else)
	case *ast.NumberForStmt:
		s.Init = forBound(expr(s.Init))
		s.Limit = forBound(expr(s.Limit))
		if s.Step != nil {
			s.Step = forBound(expr(s.Step))
		}
		stmts(s.Stmts)
	case *ast.GenericForStmt:
		exprs(s.Exprs)
		stmts(s.Stmts)
	case *ast.FuncDefStmt:
		if s.Name != nil {
			if s.Name.Func != nil {
				s.Name.Func = expr(s.Name.Func)
			}
			if s.Name.Receiver != nil {
				s.Name.Receiver = expr(s.Name.Receiver)
			}
		}
		stmts(s.Func.Stmts)
	case *ast.ReturnStmt:
		exprs(s.Exprs)
	}
}

func expr(e ast.Expr) ast.Expr {
	switch e := e.(type) {
	case *ast.NumberExpr:
		if v, ok := str2number(e.Value); ok {
			e.Value = strconv.FormatFloat(v, 'g', -1, 64)
		}
	case *ast.AttrGetExpr:
		e.Object = expr(e.Object)
		e.Key = expr(e.Key)
	case *ast.TableExpr:
		for _, f := range e.Fields {
			if f.Key != nil {
				f.Key = expr(f.Key)
			}
			f.Value = expr(f.Value)
		}
	case *ast.FuncCallExpr:
		if e.Func != nil {
			e.Func = expr(e.Func)
		}
		if e.Receiver != nil {
			e.Receiver = expr(e.Receiver)
		}
		exprs(e.Args)
	case *ast.LogicalOpExpr:
		e.Lhs, e.Rhs = expr(e.Lhs), expr(e.Rhs)
	case *ast.RelationalOpExpr:
		e.Lhs, e.Rhs = expr(e.Lhs), expr(e.Rhs)
	case *ast.StringConcatOpExpr:
		e.Lhs, e.Rhs = concatOperand(expr(e.Lhs)), concatOperand(expr(e.Rhs))
	case *ast.ArithmeticOpExpr:
		e.Lhs, e.Rhs = expr(e.Lhs), expr(e.Rhs)
		if e.Operator == "%" {
			return call(modName, e, e.Lhs, e.Rhs)
		}
	case *ast.UnaryMinusOpExpr:
		e.Expr = expr(e.Expr)
	case *ast.UnaryNotOpExpr:
		e.Expr = expr(e.Expr)
	case *ast.UnaryLenOpExpr:
		e.Expr = expr(e.Expr)
	case *ast.FunctionExpr:
		stmts(e.Stmts)
	}
	return e
}

// concatOperand wraps an operand of .. in the concat function, unless it
// is a string literal or another concatenation (whose operands are).
func concatOperand(e ast.Expr) ast.Expr {
	switch e.(type) {
	case *ast.StringExpr, *ast.StringConcatOpExpr:
		return e
	}
	return call(catName, e, e)
}

// forBound wraps a numeric for loop's bound in the number function unless
// it is a literal.
func forBound(e ast.Expr) ast.Expr {
	switch e := e.(type) {
	case *ast.NumberExpr:
		return e
	case *ast.UnaryMinusOpExpr:
		if _, ok := e.Expr.(*ast.NumberExpr); ok {
			return e
		}
	}
	return call(numName, e, e)
}

// call returns a call of the function named name on args, one value (as
// the expression it replaces), at at's lines.
func call(name string, at ast.Expr, args ...ast.Expr) ast.Expr {
	f := &ast.IdentExpr{Value: name}
	f.SetLine(at.Line())
	f.SetLastLine(at.LastLine())
	c := &ast.FuncCallExpr{Func: f, Args: args, AdjustRet: true}
	c.SetLine(at.Line())
	c.SetLastLine(at.LastLine())
	return c
}
